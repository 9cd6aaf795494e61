"""A foreground ``ql3 local run`` with no ``serve``: the owner of the data directory for as
long as the run lasts (docs/protocols.md §3.1, §3.8; issue 12 item 5).

While it owns the directory it does what ``serve`` does for the other commands: it serves
the socket, so ``runs``, ``logs -f``, ``task list``, ``inspect``, ``recovery status`` and
``cancel`` from another terminal go through it instead of failing with "in use". It streams
the task's output to this terminal as it is written. A manual run asked for through it is
refused with a clear message (nothing here would start it: no scheduler runs).

Order: storage (owner lock) -> assembly -> run recovery (live wrappers re-attached, so their
deadlines still apply) -> admission (socket) -> queue the run -> supervise and stream until
it is terminal -> admission drain -> detach from the others -> storage closed.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from dataclasses import dataclass
from typing import Any, BinaryIO

from qinglong.local.app import output
from qinglong.local.app.application import LocalStack
from qinglong.local.app.client import DirectBackend
from qinglong.local.app.datadir import DataDir
from qinglong.local.app.server import SocketServer
from qinglong.local.app.service import LocalService
from qinglong.local.app.store import LocalStore
from qinglong.shared.errors import DataDirectoryBusyError, QinglongError

STREAM_POLL_S = 0.2
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class ForegroundOwnerService(LocalService):
    """The operations a foreground run serves to other commands: all of them but a new
    manual run, which nobody here would start (no scheduler, no dispatch of other runs)."""

    def run_now(self, name: str) -> dict[str, Any]:
        """Refused: a foreground run supervises its own run only."""
        raise DataDirectoryBusyError(
            f"the data directory is owned by a foreground `ql3 local run` (pid {os.getpid()}), "
            "which supervises its own run only; run this again when it ends, or keep "
            "`ql3 local serve` running"
        )


@dataclass(frozen=True, slots=True)
class ForegroundResult:
    """The run's final view, and the signal (INT, TERM, HUP) that cancelled it, if any."""

    view: dict[str, Any]
    interrupted_by: int | None


class _LogStreamer:
    """Copies a run's output (every attempt, in order) to ``out`` as it is written."""

    def __init__(self, backend: DirectBackend, run_id: str, out: BinaryIO) -> None:
        self.backend = backend
        self.run_id = run_id
        self.out = out
        self.number = 1
        self.offset = 0

    def pump(self) -> bool:
        """Copy what is new; True once the run is terminal and everything was copied."""
        while True:
            chunk = self.backend.call("logs_read", run_id=self.run_id, attempt=self.number,
                                      offset=self.offset)
            if chunk.get("retired_at"):
                return bool(chunk["done"])
            if self.offset == 0 and self.number > 1 and chunk["data"]:
                print(f"== attempt {self.number} ==", file=sys.stderr, flush=True)
            if chunk.get("gap"):  # left out by the log cap: said once, then the tail
                self.out.flush()
                print(output.gap_notice(chunk["gap"]), file=sys.stderr, flush=True)
                self.offset = chunk["offset"]
                continue
            if chunk["data"]:
                self.out.write(chunk["data"].encode("utf-8", "surrogateescape"))
                self.out.flush()
                self.offset = chunk["offset"]
                continue
            if self.number < chunk["attempts"]:
                self.number, self.offset = self.number + 1, 0
                continue
            return bool(chunk["done"])


def run_in_foreground(
    datadir: DataDir, name: str, *, stream: BinaryIO | None, say: Any
) -> ForegroundResult:
    """Own ``datadir``, queue a manual run of task ``name``, serve the socket, stream its
    output to ``stream`` (None: not at all) and supervise it until it is terminal.

    INT, TERM or HUP cancel the run (durable intent, TERM to the wrapper, grace, KILL) and
    are reported in the result. ``say(text)`` prints a status line for the user. Raises
    DataDirectoryBusyError when another process owns the directory, and what recovery
    raises (LocalApplicationStartupRecoveryRequiredError) before anything is queued.
    """
    store = LocalStore(datadir, "run")
    stop = threading.Event()
    caught: list[int] = []

    def on_signal(signum: int, _frame: Any) -> None:
        if not caught:
            caught.append(signum)
            say("ql3: cancelling the run (TERM, then KILL after the grace period)")
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in STOP_SIGNALS}
    server: SocketServer | None = None
    stack: LocalStack | None = None
    try:
        stack = LocalStack(store)
        stack.recover()  # earlier runs still alive are supervised (deadlines) meanwhile
        service = stack.service()
        server = SocketServer(datadir.socket_path, ForegroundOwnerService(
            store.repo, supervised=True, wake=stack.wake, stop_run=stack.stop_run,
            receipts=stack.receipts))
        server.start()  # docs/protocols.md §3.8: the owner serves the socket
        queued = service.run_now(name)
        name_of_run = (f"{queued['task']}#{queued['number']}" if queued.get("number")
                       else f"run {queued['id']}")
        say(f"no `ql3 local serve` is running: running {name_of_run} here (Ctrl-C cancels it)")
        streamer = None if stream is None else _LogStreamer(
            DirectBackend(service), queued["id"], stream)
        supervised = threading.Event()
        pumping = None if streamer is None else threading.Thread(
            target=_pump_until_done, args=(streamer, supervised), name="ql3-output",
            daemon=True)
        if pumping is not None:
            pumping.start()
        try:
            stack.supervise(queued["id"], stop)
        finally:
            supervised.set()
            if pumping is not None:
                pumping.join(10.0)
        return ForegroundResult(service.run_get(queued["id"]), caught[0] if caught else None)
    finally:
        if server is not None:
            server.stop()  # admission drain first, as serve does
        if stack is not None:
            stack.coordinator.detach(5.0)  # re-attached runs of others go on; serve takes them
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        store.close()


def _pump_until_done(streamer: _LogStreamer, supervised: threading.Event) -> None:
    """Stream until the run is terminal and its output copied (a cancel keeps streaming:
    the task may print while it stops). Once supervision has ended (``supervised`` set),
    one more pass copies the rest and the stream ends, whatever a read says."""
    while True:
        last = supervised.is_set()
        try:
            if streamer.pump() or last:
                return
        except OSError:  # the terminal went away: the run goes on, unwatched
            return
        except QinglongError:
            if last:
                return
        supervised.wait(STREAM_POLL_S)
