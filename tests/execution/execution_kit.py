"""A real local stack for coordinator tests (no fakes: SQLite, launcher, wrapper)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from qinglong.local.execution.coordinator import ExecutionConfig, ExecutionCoordinator
from qinglong.local.process.launcher import LaunchConfig, LocalProcessLauncher
from qinglong.local.process.receipt_store import ReceiptStore
from qinglong.local.storage.migrations import open_database
from qinglong.local.storage.repository import LocalRunRepository
from qinglong.shared.domain import Run, Task, Trigger
from qinglong.shared.ids import uuid7
from qinglong.shared.statuses import RUN_TERMINAL


class Stack:
    def __init__(self, tmp: Path, grace_s: float = 1.0) -> None:
        self.tmp = tmp
        self.log_root = tmp / "logs"
        self.log_root.mkdir(mode=0o700)
        self.db = open_database(str(tmp / "ql3.db"))
        self.repo = LocalRunRepository(self.db)
        self.receipts = ReceiptStore(str(tmp / "receipts"))
        self.launcher = LocalProcessLauncher(
            LaunchConfig(log_root=str(self.log_root), receipt_root=str(tmp / "receipts")),
            self.repo,
        )
        self.settled = threading.Event()
        self.coordinator = ExecutionCoordinator(
            self.repo, self.launcher, self.receipts,
            ExecutionConfig(log_root=str(self.log_root), grace_s=grace_s,
                            base_env={"PATH": os.environ["PATH"]},
                            retry_base_s=0.05, retry_cap_s=0.2),
            on_settled=lambda run: self.settled.set(),
        )

    def task(self, *argv: str, **kw: object) -> Task:
        return self.repo.create_task(Task(id=uuid7(), name=f"t{uuid7()[-8:]}", argv=argv,
                                          schedule="@once", cwd=str(self.tmp),
                                          **kw))  # type: ignore[arg-type]

    def start(self, task: Task) -> Run:
        run = self.repo.create_run(task.id, Trigger.MANUAL)
        assert run is not None
        return self.coordinator.start(run, task)

    def until_terminal(self, run_id: str, timeout: float = 20) -> Run:
        """Drive retries like the dispatcher would, until the run is terminal."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            run = self.repo.get_run(run_id)
            if run.status in RUN_TERMINAL:
                return run
            if run.status.value == "queued" and run.not_before_ms <= self.repo.clock():
                task = self.repo.get_task_by_id(run.task_id)
                self.coordinator.start(run, task)
            time.sleep(0.02)
        raise AssertionError("run did not finish in time")

    def close(self) -> None:
        self.coordinator.drain(10)
        self.db.close()
