"""The pinned SHA-256 of ``wrapper.py`` (DESIGN.md §3.2 step 2, ADR-0069 §2 step 2).

A constant in the code, never computed from the file at run time: changing the wrapper is
a reviewed change in two places, and ``tests/process`` fails while they disagree.
"""

from __future__ import annotations

WRAPPER_SHA256 = "4183ccf75508dca30bf6612a9305fa7387ec0a9e52e3b0fd9bf9c5ecd88f5d81"
