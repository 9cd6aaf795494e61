"""The pinned SHA-256 of ``wrapper.py`` (DESIGN.md §3.2 step 2, ADR-0069 §2 step 2).

A constant in the code, never computed from the file at run time: changing the wrapper is
a reviewed change in two places, and ``tests/process`` fails while they disagree.
"""

from __future__ import annotations

WRAPPER_SHA256 = "756da50fdf3d58fec388fcc5b449daf80b7c0ece303e2d73b924941ea5a47fe0"
