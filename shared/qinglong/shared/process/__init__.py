"""Stdlib-only Linux process primitives shared by the profiles (DESIGN.md §1)."""
