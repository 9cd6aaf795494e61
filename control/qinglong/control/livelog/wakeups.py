"""Wake-ups across replicas (docs/protocols.md §4.9 "Wake-ups").

``LogWakeups`` keeps one dedicated LISTEN session per replica (psycopg 3, autocommit, its own
connection — never one of the pool's) in a daemon thread and fans each NOTIFY out in
process: every follower of that attempt waiting in ``wait`` is woken. The payload is only
``"<attempt id> <end offset>"``. A lost session is reopened with a capped backoff (0.2 s
doubling to 5 s); after each reconnect every waiter is woken, because notifications sent while
the session was down are gone. Followers never rely on NOTIFY alone: ``wait`` also returns
after ``REREAD_S`` (2 s) so they re-read the database.

The same session also listens on ``ql3_claimable`` (docs/protocols.md §4.2 "Claims that
wait"): each such NOTIFY wakes every claim waiting on this replica (registered under
``CLAIMABLE``); a reconnect wakes them too.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections import defaultdict
from collections.abc import Callable
from typing import Any

CHANNEL = "ql3_log"
CLAIM_CHANNEL = "ql3_claimable"
CLAIMABLE = "claimable"  # the waiters' key for claim wake-ups (never an attempt id)
REREAD_S = 2.0

_log = logging.getLogger("qinglong.control.livelog")


class LogWakeups:
    """In-process fan-out of log NOTIFYs to asyncio waiters.

    ``connect``: opens the dedicated session (a ``psycopg.Connection`` in autocommit), or
    None to run without a listener (tests of one process; ``wake`` still works). ``start``
    begins listening in a thread; ``stop`` ends it (idempotent)."""

    def __init__(self, connect: Callable[[], Any] | None) -> None:
        self._connect = connect
        self._waiters: dict[str, set[tuple[asyncio.AbstractEventLoop, asyncio.Event]]] = \
            defaultdict(set)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.reconnects = 0
        self.notifications = 0

    def start(self) -> None:
        """Listen in a daemon thread (no-op without ``connect`` or when started)."""
        if self._connect is None or self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="ql3-log-listen", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 3.0) -> bool:
        """Stop listening; True when the thread ended within ``timeout_s``."""
        self._stop.set()
        self.wake_all()
        if self._thread is not None:
            self._thread.join(timeout_s)
            return not self._thread.is_alive()
        return True

    def wake(self, attempt_id: str) -> None:
        """Wake every waiter of ``attempt_id`` (thread-safe)."""
        with self._lock:
            waiters = list(self._waiters.get(attempt_id, ()))
        for loop, event in waiters:
            loop.call_soon_threadsafe(event.set)

    def wake_all(self) -> None:
        """Wake every waiter (after a listener reconnect, at stop)."""
        with self._lock:
            waiters = [w for ws in self._waiters.values() for w in ws]
        for loop, event in waiters:
            loop.call_soon_threadsafe(event.set)

    def register(self, attempt_id: str) -> asyncio.Event:
        """An event set at the next wake of ``attempt_id``; call before reading, so a chunk
        stored between the read and the wait still wakes; ``unregister`` it after."""
        event = asyncio.Event()
        with self._lock:
            self._waiters[attempt_id].add((asyncio.get_running_loop(), event))
        return event

    def unregister(self, attempt_id: str, event: asyncio.Event) -> None:
        """Forget ``event`` (registered by ``register``)."""
        with self._lock:
            waiters = self._waiters.get(attempt_id)
            if waiters is None:
                return
            waiters.difference_update({w for w in waiters if w[1] is event})
            if not waiters:
                del self._waiters[attempt_id]

    async def wait(self, event: asyncio.Event, timeout_s: float) -> bool:
        """Wait for ``event`` at most ``min(timeout_s, REREAD_S)`` seconds; True when woken.
        The event is cleared for the next wait."""
        try:
            await asyncio.wait_for(event.wait(), max(0.0, min(timeout_s, REREAD_S)))
        except TimeoutError:
            return False
        event.clear()
        return True

    def _run(self) -> None:
        delay = 0.2
        first = True
        failures = 0  # failed connects since the last good session
        while not self._stop.is_set():
            conn = None
            try:
                assert self._connect is not None
                conn = self._connect()
                conn.execute(f"LISTEN {CHANNEL}")
                conn.execute(f"LISTEN {CLAIM_CHANNEL}")
                if not first:
                    self.reconnects += 1
                    self.wake_all()  # what was sent while we were away is gone: re-read
                if failures:
                    _log.info("log listener reconnected after %d failed attempt(s)", failures)
                first, delay, failures = False, 0.2, 0
                while not self._stop.is_set():
                    for note in conn.notifies(timeout=0.5, stop_after=64):
                        if note.channel == CLAIM_CHANNEL:
                            self.wake(CLAIMABLE)
                        else:
                            self._deliver(note.payload)
            except Exception as exc:  # a lost session: reconnect with backoff, never crash
                if self._stop.is_set():
                    break
                failures += 1
                if failures == 1:  # one line per outage, not one per retry (backoff to 5 s)
                    _log.warning("log listener lost its session (%s); reconnecting",
                                 type(exc).__name__)
                first = False
                self._stop.wait(delay)
                delay = min(delay * 2, 5.0)
            finally:
                if conn is not None:
                    with contextlib.suppress(Exception):  # closing a broken session
                        conn.close()

    def _deliver(self, payload: str) -> None:
        attempt_id, _, _end = payload.partition(" ")
        self.notifications += 1
        self.wake(attempt_id)
