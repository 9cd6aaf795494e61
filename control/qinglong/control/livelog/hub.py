"""A replica's live-log state shared by its routes: the wake-up fan-out, the NOTIFY gate, the
byte budget and the draining flag (docs/protocols.md §4.9)."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from starlette.concurrency import run_in_threadpool

from qinglong.control.livelog.append import ByteBudget, NotifyGate, notify_end
from qinglong.control.livelog.wakeups import LogWakeups

if TYPE_CHECKING:
    from sqlalchemy import Engine


@dataclass
class LiveLogHub:
    """``wakeups``: the LISTEN fan-out (``LogWakeups(None)``: in-process only); ``gate``:
    one NOTIFY per attempt per 100 ms; ``budget``: the replica's byte budget; ``draining``:
    set when the replica stops, so Server-Sent Event streams end with a ``retry:`` hint;
    ``pending``: the NOTIFYs held back by the gate (attempt id → end), sent by the event loop."""

    wakeups: LogWakeups = field(default_factory=lambda: LogWakeups(None))
    gate: NotifyGate = field(default_factory=NotifyGate)
    budget: ByteBudget = field(default_factory=ByteBudget)
    draining: threading.Event = field(default_factory=threading.Event)
    pending: dict[str, int] = field(default_factory=dict)  # deferred NOTIFYs: attempt → end
    _tasks: set[asyncio.Task[Any]] = field(default_factory=set)

    def defer_notify(self, engine: Engine, attempt_id: str, end: int) -> None:
        """Send the NOTIFY the gate held back once the attempt's 100 ms have passed (one
        pending per attempt, carrying the latest end). Call from the event loop."""
        scheduled = attempt_id in self.pending
        self.pending[attempt_id] = max(end, self.pending.get(attempt_id, 0))
        if scheduled:
            return
        loop = asyncio.get_running_loop()

        def send() -> None:
            latest = self.pending.pop(attempt_id, None)
            if latest is None:
                return
            if not self.gate.due(attempt_id):  # an append notified meanwhile: wait again
                self.pending[attempt_id] = latest
                loop.call_later(self.gate.wait_s(attempt_id), send)
                return
            task = loop.create_task(run_in_threadpool(notify_end, engine, attempt_id, latest))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

        loop.call_later(self.gate.wait_s(attempt_id), send)


def hub_of(extras: dict[str, Any]) -> LiveLogHub:
    """The hub kept in ``ApiContext.extras["livelog"]`` (created on first use)."""
    hub = extras.get("livelog")
    if not isinstance(hub, LiveLogHub):
        hub = extras["livelog"] = LiveLogHub()
    return hub
