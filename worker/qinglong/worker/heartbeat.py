"""Heartbeats of one attempt (docs/protocols.md §4.2): renew the lease every ``heartbeat_ms``,
move the self-fencing deadline on each success, relay cancel and lease loss to the runner.

A heartbeat's retries never pass the fence deadline (the client's ``deadline``); when control
stays unreachable the runner's supervision sees the fence expire and kills the group. An
answer handled after the fence deadline (the worker was frozen) renews nothing (fencing.py).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from qinglong.shared.wire import HeartbeatReport, LeaseRef
from qinglong.worker import clock
from qinglong.worker.client import ControlClient
from qinglong.worker.errors import ControlUnavailableError, LeaseLostError, WorkerError
from qinglong.worker.fencing import LeaseFence

log = logging.getLogger("qinglong.worker")


class Heartbeater:
    """A daemon thread renewing ``lease`` from ``first_sent_at + heartbeat_ms`` on (monotonic
    s / ms). ``on_cancel()`` runs when control asks to cancel; ``on_lost()`` on a 409 (then the
    thread ends). ``stop()`` ends it (idempotent)."""

    def __init__(self, client: ControlClient, lease: LeaseRef, fence: LeaseFence,
                 first_sent_at: float, heartbeat_ms: int, on_cancel: Callable[[], None],
                 on_lost: Callable[[], None]) -> None:
        self._client = client
        self._lease = lease
        self._fence = fence
        self._next_at = first_sent_at + heartbeat_ms / 1000.0
        self._period_s = heartbeat_ms / 1000.0
        self._on_cancel = on_cancel
        self._on_lost = on_lost
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ql3-heartbeat", daemon=True)

    def start(self) -> None:
        """Start beating."""
        self._thread.start()

    def stop(self) -> None:
        """Stop beating; does not wait for a request in flight (it is bounded by the fence)."""
        self._done.set()

    def _run(self) -> None:
        while not self._done.wait(max(0.0, self._next_at - clock.now())):
            sent_at = clock.now()
            try:
                answer = self._client.heartbeat(HeartbeatReport(lease=self._lease),
                                                deadline=self._fence.deadline)
            except LeaseLostError:
                if not self._done.is_set():
                    self._on_lost()
                return
            except ControlUnavailableError as exc:
                log.warning("attempt %s: heartbeat failed until the fence deadline (%s)",
                            self._lease.attempt_id, exc.cause)
                self._next_at = clock.now() + self._period_s
                continue
            except WorkerError as exc:
                log.error("attempt %s: heartbeat refused: %s", self._lease.attempt_id, exc)
                self._next_at = sent_at + self._period_s
                continue
            if not self._fence.renewed(sent_at, answer.lease_ms):
                log.warning("attempt %s: heartbeat answered after the fence deadline: the "
                            "attempt is fenced", self._lease.attempt_id)
                return  # the fence stays passed: the runner's checks forget the attempt
            if answer.cancel:
                self._on_cancel()
            self._next_at = sent_at + self._period_s
