"""Run Attempt log retention (ADR-0379; docs/protocols.md §4.3): enrollment, claims, finalize."""
