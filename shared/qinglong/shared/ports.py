"""Ports (Protocols) that infrastructure code calls and storage adapters implement."""

from __future__ import annotations

from typing import Protocol


class ReceiptJournal(Protocol):
    """The receipt cleanup journal as the launcher sees it (ADR-0069 §3).

    ``register`` must be durable (committed, FULL sync) when it returns. It succeeds only for
    an existing ``local_process`` attempt of the matching run; the same call twice is
    idempotent; a conflicting one raises ConflictError; a missing attempt NotFoundError;
    storage failures StorageError.
    """

    def register(self, run_id: str, attempt_id: str, receipt_path: str) -> None:
        """Record (run, attempt, receipt path) as ``pending`` before the spawn."""
        ...
