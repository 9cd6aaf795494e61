"""Run Attempt log retention (ADR-0379; DESIGN.md §4.3): enrollment, claims, finalize."""
