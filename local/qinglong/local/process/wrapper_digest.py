"""The pinned SHA-256 of ``wrapper.py`` (docs/protocols.md §3.2 step 2, ADR-0069 §2 step 2).

A constant in the code, never computed from the file at run time: changing the wrapper is
a reviewed change in two places, and ``tests/process`` fails while they disagree.
"""

from __future__ import annotations

WRAPPER_SHA256 = "08cc4f8f01217927fedba17a7ea618ff861a77524c3b34d7646d883cc930d4c8"
