"""The local profile's attempt lock as the shared leftover stopper sees it (issue 10 item 5,
case C18).

The rule itself (find, pin, TERM, grace, KILL, report) is profile-neutral and lives in
``qinglong.shared.process.leftovers``; this module adapts one attempt's ``<attempt>.lock`` in
the receipt shard (:class:`ReceiptStore`) to its :class:`AttemptLockPort`.
"""

from __future__ import annotations

from qinglong.local.process.receipt_store import ReceiptStore
from qinglong.shared.process.lock_holders import find_lock_holders


class ReceiptStoreLock:
    """``AttemptLockPort`` of one attempt's ``<attempt>.lock`` in a ReceiptStore."""

    def __init__(self, receipts: ReceiptStore, attempt_id: str) -> None:
        self._receipts = receipts
        self._attempt_id = attempt_id

    def held(self) -> bool:
        """Non-blocking probe (``ReceiptStore.lock_held``)."""
        return self._receipts.lock_held(self._attempt_id)

    def holders(self) -> list[int]:
        """``find_lock_holders`` on the lock path (a bounded ``/proc`` scan)."""
        return find_lock_holders(self._receipts.lock_path(self._attempt_id))
