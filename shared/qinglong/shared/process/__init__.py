"""Stdlib-only Linux process primitives shared by the profiles (docs/architecture.md §1)."""
