"""The control plane's HTTP API (FastAPI; DESIGN.md §4.5)."""
