"""The pinned SHA-256 of ``wrapper.py`` (docs/protocols.md §3.2 step 2, ADR-0069 §2 step 2).

A constant in the code, never computed from the file at run time: changing the wrapper is
a reviewed change in two places, and ``tests/process`` fails while they disagree.
"""

from __future__ import annotations

WRAPPER_SHA256 = "ec03fc75e127a96fde46c22b533def0b77bc4d8145dbb620e256b33b63549fab"
