"""Fault-injection points for the crash matrix (issue 3): named protocol steps at which a
test makes the owning process SIGKILL itself.

``QL3_FAULT_POINT=<name>`` in the environment arms one point; unset (always, in production)
every call is one dictionary lookup. The points, in protocol order:
``after_register`` (journal registered, before spawn), ``after_spawn`` (before the handle
write), ``before_gate`` (handle saved, gate still closed), ``after_gate`` (user code may
run), ``after_exit`` (the wrapper's exit seen, receipt not read), ``after_receipt`` (receipt
read, before the terminal commit), ``after_commit`` (before the receipt file is deleted),
``after_delete`` (before the journal row is resolved).
"""

from __future__ import annotations

import os
import signal

ENV_FAULT_POINT = "QL3_FAULT_POINT"
POINTS = (
    "after_register",
    "after_spawn",
    "before_gate",
    "after_gate",
    "after_exit",
    "after_receipt",
    "after_commit",
    "after_delete",
)


def fault_point(name: str) -> None:
    """SIGKILL this process if ``QL3_FAULT_POINT`` names this point (tests only)."""
    if os.environ.get(ENV_FAULT_POINT) == name:
        os.kill(os.getpid(), signal.SIGKILL)
