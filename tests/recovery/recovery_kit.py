"""A real repository and receipt store with runs left active, as a crashed owner leaves them."""

from __future__ import annotations

import os
from pathlib import Path

from qinglong.local.process.receipt_store import ReceiptStore
from qinglong.local.recovery.quarantine import quarantine_receipt
from qinglong.local.recovery.reconciler import LocalRunReconciler
from qinglong.local.storage.migrations import open_database
from qinglong.local.storage.repository import LocalRunRepository
from qinglong.shared.domain import Attempt, Run, Task, Trigger
from qinglong.shared.handles import ProcessHandle
from qinglong.shared.ids import uuid7
from qinglong.shared.process.identity import read_boot_id, read_stat
from qinglong.shared.receipts import CompletionReceipt, ReceiptOutcome


class Kit:
    def __init__(self, tmp: Path) -> None:
        self.db = open_database(str(tmp / "ql3.db"))
        self.repo = LocalRunRepository(self.db)
        self.receipts = ReceiptStore(str(tmp / "receipts"))
        self.task = self.repo.create_task(
            Task(id=uuid7(), name="t", argv=("true",), schedule="@once")
        )
        self.reconciler = LocalRunReconciler(
            self.repo, self.receipts,
            lambda run_id, attempt_id: quarantine_receipt(
                self.repo, self.receipts, run_id, attempt_id),
            retry_base_s=0.01, retry_cap_s=0.02,
        )

    def left_running(self, handle: ProcessHandle | None, *, starting: bool = False,
                     task: Task | None = None) -> tuple[Run, Attempt]:
        run = self.repo.create_run((task or self.task).id, Trigger.MANUAL)
        assert run is not None
        attempt = self.repo.claim_attempt(run)
        attempt = self.repo.record_start_intent(attempt, log_path="/x", deadline_at_ms=None)
        self.receipts.prepare_shard(attempt.id)
        self.repo.register(run.id, attempt.id, self.receipts.receipt_path(attempt.id))
        if not starting:
            assert handle is not None
            attempt = self.repo.save_handle(attempt, handle.encode())
        return self.repo.get_run(run.id), attempt

    def write_receipt(self, run: Run, attempt: Attempt, handle: ProcessHandle, *,
                      code: int = 0, raw: bytes | None = None) -> Path:
        data = raw if raw is not None else CompletionReceipt(
            run.id, attempt.id, handle, ReceiptOutcome.EXITED, code, None, 1
        ).encode()
        path = Path(self.receipts.receipt_path(attempt.id))
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.write(fd, data)
        os.close(fd)
        return path


def handle_of(pid: int) -> ProcessHandle:
    """The exact handle of a live process."""
    stat = read_stat(pid)
    assert stat is not None
    return ProcessHandle(read_boot_id(), pid, stat.pgid, stat.start_ticks)
