"""The pinned SHA-256 of ``wrapper.py`` (docs/protocols.md §3.2 step 2, ADR-0069 §2 step 2).

A constant in the code, never computed from the file at run time: changing the wrapper is
a reviewed change in two places, and ``tests/process`` fails while they disagree.
"""

from __future__ import annotations

WRAPPER_SHA256 = "60127ea87c47e8d610ee30fe54949e059d42b8f964f433df4dea988cee59d45b"
