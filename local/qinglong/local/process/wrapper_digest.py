"""The pinned SHA-256 of ``wrapper.pyw`` and of the two files it compiles for a piped log,
``qinglong/shared/output_mask.py`` and ``log_cap.py`` (docs/protocols.md §3.2 step 2,
ADR-0069 §2 step 2).

A constant in the code, never computed from the file at run time: changing the wrapper is
a reviewed change in two places, and ``tests/process`` fails while they disagree.
"""

from __future__ import annotations

WRAPPER_SHA256 = "a3d91f4509b656f7e03a5ff2ec724528a076235aa6e435f8e48ec63a5fb41cc9"
OUTPUT_MASK_SHA256 = "c7cae5380583f68b88d60881fef4a8a39cd5bfaa013bdeccd812f4924bae966b"
LOG_CAP_SHA256 = "aec8c15af8754d703d7a70923a8c4ec921a1bb15642ec313f4fa733de1fa6cd3"
