"""The pinned SHA-256 of ``wrapper.py`` and of the two files it compiles for a piped log,
``qinglong/shared/output_mask.py`` and ``log_cap.py`` (docs/protocols.md §3.2 step 2,
ADR-0069 §2 step 2).

A constant in the code, never computed from the file at run time: changing the wrapper is
a reviewed change in two places, and ``tests/process`` fails while they disagree.
"""

from __future__ import annotations

WRAPPER_SHA256 = "c8918ac5e5573df1446536490db87b1e8905178761eb9000830f333c0b160a6f"
OUTPUT_MASK_SHA256 = "23dffbf38ca47c87a2df16eef1484f10d0bd033ece2764e0ba737461ed06bd5c"
LOG_CAP_SHA256 = "1f6a09a042e9dd61bcc3e812a3ea692fe40a800e469a59f40e7ab53dea93f192"
