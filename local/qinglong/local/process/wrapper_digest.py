"""The pinned SHA-256 of ``wrapper.py`` (DESIGN.md §3.2 step 2, ADR-0069 §2 step 2).

A constant in the code, never computed from the file at run time: changing the wrapper is
a reviewed change in two places, and ``tests/process`` fails while they disagree.
"""

from __future__ import annotations

WRAPPER_SHA256 = "13180a71804e0e3de03e6f0265e9e32cc89784ebcfb77f5325fe970f9b13b77f"
