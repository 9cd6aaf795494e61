"""The local application's lifecycle: the one place that orders start and stop.

ADR-0069 §5, ADR-0067 §3, docs/protocols.md §3.6::

    start: storage ready -> assembly (no side effects) -> receipt-first run recovery
           -> one bounded cleanup page -> domain recovery (@boot runs)
           -> lifecycles (cleanup, retention, scheduler loop) -> admission (socket) -> active
    stop:  admission drain -> cleanup and retention lifecycles -> scheduler loop
           -> stack (running attempts drained, or detached) -> storage

A disabled application creates no store, launcher, timer or database handle.
"""

from __future__ import annotations

import threading

from qinglong.local.app import settings as keys
from qinglong.local.app.application import LocalStack
from qinglong.local.app.datadir import DataDir
from qinglong.local.app.server import SocketServer
from qinglong.local.app.store import LocalStore


class LocalApplication:
    """Start and stop of ``serve``. ``steps`` records what happened, in order (for tests
    and the operator's log). ``start`` raises what its steps raise (storage errors,
    DataDirectoryBusyError, LocalApplicationStartupRecoveryRequiredError) after undoing the
    steps already taken; ``stop`` is idempotent and callable without ``start``."""

    def __init__(
        self,
        datadir: DataDir,
        *,
        enabled: bool = True,
        grace_s: float | None = None,
        detach: bool = False,
    ) -> None:
        self.datadir = datadir
        self.enabled = enabled
        self.grace_s = grace_s
        self.detach = detach
        self.steps: list[str] = []
        self.store: LocalStore | None = None
        self.stack: LocalStack | None = None
        self._server: SocketServer | None = None
        self._loop: threading.Thread | None = None
        self._stop_loop = threading.Event()
        self._lock = threading.Lock()

    def start(self) -> None:
        """Run the start order; on failure, stop what was started and re-raise."""
        if not self.enabled:
            self.steps.append("disabled")
            return
        try:
            self.store = LocalStore(self.datadir, "serve")
            self.steps.append("storage")
            stack = self.stack = LocalStack(self.store, grace_s=self.grace_s)
            self.steps.append("assembly")
            stack.recover()
            self.steps.append("run_recovery")
            stack.cleanup_startup_page()
            self.steps.append("cleanup_page")
            stack.scheduler.boot(self.store.repo.clock())
            self.steps.append("domain_recovery")
            stack.start_maintenance()
            stack.notifier.start()
            self._loop = threading.Thread(
                target=stack.run_loop, args=(self._stop_loop,), name="ql3-scheduler"
            )
            self._loop.start()
            self.steps.append("lifecycles")
            self._server = SocketServer(self.datadir.socket_path, stack.service())
            self._server.start()
            self.steps.append("admission")
        except BaseException:
            self.stop()
            raise
        self.steps.append("active")

    def stop(self) -> None:
        """Run the stop order (idempotent)."""
        with self._lock:
            if self._server is not None:
                self._server.stop()
                self._server = None
                self.steps.append("admission_drained")
            stack = self.stack
            if stack is not None:
                stack.stop_maintenance()
                self._stop_loop.set()
                stack.wake()
                if self._loop is not None:
                    self._loop.join()
                    self._loop = None
                self.steps.append("lifecycles_stopped")
                if self.detach:
                    stack.coordinator.detach(5.0)
                else:
                    stack.coordinator.drain()
                self.steps.append("stack_stopped")
                # after the drain, so its outcomes are notified; each delivery is bounded
                stack.notifier.stop(2 * keys.NOTIFY_TIMEOUT_MAX_S + 5)
                self.stack = None
            if self.store is not None:
                self.store.close()
                self.store = None
                self.steps.append("storage_closed")
