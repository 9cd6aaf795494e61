"""The pinned SHA-256 of ``wrapper.py`` (docs/protocols.md §3.2 step 2, ADR-0069 §2 step 2).

A constant in the code, never computed from the file at run time: changing the wrapper is
a reviewed change in two places, and ``tests/process`` fails while they disagree.
"""

from __future__ import annotations

WRAPPER_SHA256 = "1272d2182dc5574ccaa1f5c1a3c41c542a993d8aaa4e8462f88178925f9f0aad"
