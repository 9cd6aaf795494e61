"""Helpers for the maintenance tests: a real SQLite repository, real files in tmp_path and an
injected clock (no fakes of the storage or the file system)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from qinglong.local.process.receipt_store import ReceiptStore
from qinglong.local.storage.database import Database
from qinglong.local.storage.migrations import open_database
from qinglong.local.storage.repository import LocalRunRepository
from qinglong.shared.domain import Attempt, Run, Task, Trigger
from qinglong.shared.handles import ProcessHandle
from qinglong.shared.ids import uuid7
from qinglong.shared.receipts import CompletionReceipt, ReceiptOutcome
from qinglong.shared.statuses import AttemptStatus

BOOT_ID = "0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9"
DAY_MS = 86_400_000
T0 = 1_900_000_000_000  # a fixed "now" in Unix ms (2030), moved by tests


class Clock:
    """An injectable Unix-ms clock."""

    def __init__(self, ms: int = T0) -> None:
        self.ms = ms

    def __call__(self) -> int:
        return self.ms

    def advance(self, ms: int) -> None:
        self.ms += ms


@dataclass
class Made:
    """A run with one attempt registered in the receipt journal."""

    task: Task
    run: Run
    attempt: Attempt


class Kit:
    """A migrated database, its repository, a receipt store and a log root under ``tmp``."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.clock = Clock()
        self.db: Database = open_database(str(tmp / "ql3.db"))
        self.repo = LocalRunRepository(self.db, clock=self.clock)
        self.receipts = ReceiptStore(str(tmp / "receipts"))
        self.log_root = tmp / "logs"
        self.log_root.mkdir(mode=0o700)
        self._task: Task | None = None

    def task(self, name: str | None = None, **kw: object) -> Task:
        return self.repo.create_task(
            Task(id=uuid7(), name=name or f"t{uuid7()[-8:]}", argv=("true",),
                 schedule="@once", **kw)  # type: ignore[arg-type]
        )

    def default_task(self) -> Task:
        if self._task is None:
            self._task = self.task("default")
        return self._task

    def attempt(
        self,
        status: AttemptStatus = AttemptStatus.SUCCEEDED,
        *,
        task: Task | None = None,
        register: bool = True,
        log: bytes | None = None,
    ) -> Made:
        """A run and its attempt moved to ``status`` (claimed, running or a terminal one),
        registered in the journal (``register``), with a log file holding ``log``."""
        task = task or self.default_task()
        run = self.repo.create_run(task.id, Trigger.MANUAL)
        assert run is not None
        attempt = self.repo.claim_attempt(run)
        if status is not AttemptStatus.CLAIMED:
            log_path = self.log_root / task.id / f"{run.id}.{attempt.number}.log"
            attempt = self.repo.record_start_intent(attempt, log_path=str(log_path),
                                                    deadline_at_ms=None)
            if log is not None:
                log_path.parent.mkdir(mode=0o700, exist_ok=True)
                log_path.write_bytes(log)
        if register:
            self.repo.register(run.id, attempt.id, self.receipts.receipt_path(attempt.id))
        if status not in (AttemptStatus.CLAIMED, AttemptStatus.STARTING):
            handle = ProcessHandle(BOOT_ID, 4242, 4242, 7).encode()
            attempt = self.repo.save_handle(attempt, handle)
        if status not in (AttemptStatus.CLAIMED, AttemptStatus.STARTING, AttemptStatus.RUNNING):
            self.repo.finish_attempt(attempt, status, exit_code=0)
            attempt = self.repo.get_attempt(attempt.id)
        return Made(task, self.repo.get_run(run.id), attempt)

    def write_receipt(self, made: Made, data: bytes | None = None) -> str:
        """Publish a receipt file (a valid one unless ``data``) for the attempt."""
        self.receipts.prepare_shard(made.attempt.id)
        path = self.receipts.receipt_path(made.attempt.id)
        if data is None:
            handle = ProcessHandle(BOOT_ID, 4242, 4242, 7)
            data = CompletionReceipt(made.run.id, made.attempt.id, handle,
                                     ReceiptOutcome.EXITED, 0, None, self.clock()).encode()
        with open(path, "wb") as fh:
            fh.write(data)
        return path

    def write_lock(self, made: Made) -> str:
        self.receipts.prepare_shard(made.attempt.id)
        path = self.receipts.lock_path(made.attempt.id)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
        os.close(fd)
        return path

    def journal(self) -> dict[str, str]:
        """attempt id -> state of every journal row."""
        return {a: s for a, s, _ in self.repo.journal_rows()}

    def close(self) -> None:
        self.db.close()
