"""A real `ql3 worker run` process against an in-process fake control (real HTTP)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_control import TOKEN, FakeControl

QL3 = str(Path(sys.executable).parent / "ql3")


class WorkerProc:
    def __init__(self, control: FakeControl, tmp: Path, *extra: str,
                 group: int | None = None, token_env: bool = True,
                 env_extra: dict[str, str | None] | None = None, cwd: Path | None = None,
                 control_url: str | None = None) -> None:
        """``env_extra`` sets (or, with None, removes) variables; ``cwd`` is the worker's
        own working directory; ``control_url`` replaces the fake's URL."""
        self.stderr_path = tmp / "worker.stderr"
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        if token_env:
            env["QL3_WORKER_TOKEN"] = TOKEN
        env["QL3_WORKER_TEST_SENTINEL"] = "visible-to-worker-only"
        for key, value in (env_extra or {}).items():
            if value is None:
                env.pop(key, None)
            else:
                env[key] = value
        with self.stderr_path.open("wb") as err:
            self.proc = subprocess.Popen(
                [QL3, "worker", "run", "--control-url", control_url or control.url,
                 "--name", "w1", "--spool-dir", str(tmp / "spool"), "--grace", "0.5",
                 # these tests are about other things: a task writes into pytest's own
                 # 0700 tmp, which an attempt uid could not (isolation: its own tests)
                 *([] if "--isolation" in extra else ["--isolation", "none",
                                                      "--allow-shared-uid"]), *extra],
                env=env, stdout=subprocess.DEVNULL, stderr=err, group=group, cwd=cwd,
            )

    def stderr(self) -> str:
        return self.stderr_path.read_text()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)


@pytest.fixture
def control() -> Iterator[FakeControl]:
    fake = FakeControl().start()
    yield fake
    fake.close()


@pytest.fixture
def start_worker(control: FakeControl, tmp_path: Path) -> Iterator[type[WorkerProc]]:
    started: list[WorkerProc] = []

    def make(*extra: str, group: int | None = None, token_env: bool = True,
             env_extra: dict[str, str | None] | None = None, cwd: Path | None = None,
             control_url: str | None = None) -> WorkerProc:
        w = WorkerProc(control, tmp_path, *extra, group=group, token_env=token_env,
                       env_extra=env_extra, cwd=cwd, control_url=control_url)
        started.append(w)
        return w

    yield make  # type: ignore[misc]
    for w in started:
        w.stop()
