"""The control plane's HTTP API (FastAPI; docs/protocols.md §4.5)."""
