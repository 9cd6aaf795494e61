"""``ql3 cluster logs``: an attempt's output, while it runs and after (protocols §4.4, §4.9).

Reads go through the raw path ``GET /v1/attempts/{id}/log?offset=N`` (``&wait=S``: a long
poll of at most 25 s while the attempt runs; ``?tail=K``: start K bytes before the end).
The answer's body is raw bytes; headers ``QL3-Log-Offset`` (the first byte's raw offset, past
N when N lay in a gap), ``QL3-Log-Gap`` (bytes skipped between N and it), ``QL3-Log-Next``
(the offset to ask next), ``QL3-Log-State`` (``running`` / ``complete``) and
``QL3-Attempt-Status``. A gap prints as one line ``[… N bytes not streamed live …]``.

A finished attempt with a stored log is printed as stored (``GET …/log``, the capped log's
marker line included). A lost attempt (or one whose log could not be stored) shows what its
worker streamed, with a line saying it may be incomplete. ``-f`` follows the run's newest
attempt until the run ends (a retry's new attempt included), then prints a status line
(status, exit code, duration) and exits as ``run --wait`` does: 0 only when the run
succeeded. Each request fails over across ``--control-url a,b,c`` (a read goes to the next
replica on a transport error or a 502/503/504: ``http.py``); when every replica fails, a
follower retries for FOLLOW_RETRY_S before giving up.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

import click

from qinglong.client import output
from qinglong.client.cli_common import connection, display_options, resolve_run
from qinglong.client.errors import (
    ControlFailedError,
    ControlNotFoundError,
    ControlNotReadyError,
    ControlUnreachableError,
    LogRetiredError,
    LogUnavailableError,
)
from qinglong.client.http import ControlClient
from qinglong.client.output import TERMINAL
from qinglong.shared.display import when
from qinglong.shared.errors import RunNotSucceededError

RUN_HELP = "RUN is a run id, TASK#N, TASK@last, or the last 6+ hex digits of a run id."
WAIT_S = 25  # the longest long poll control holds
FOLLOW_RETRY_S = 60.0  # every replica failing: keep trying this long while following
RETRY_PAUSE_S = 1.0
QUEUED_POLL_S = 1.0
TAIL_BYTES_PER_LINE = 256  # --tail N lines reads about this much per line from the end
LIVE = ("claimed", "starting", "running")
PARTIAL = ("lost", "not_started")
UNSTORED = "log_unavailable"  # an attempt's reason: its log could not be stored


def gap_line(count: int, capped: bool = False) -> str:
    """The line printed where ``count`` bytes were not streamed live (or, in a finished
    attempt's stored log, were left out by the output cap: ``capped``)."""
    if capped:
        return f"[… {count} bytes left out by the output cap …]"
    return f"[… {count} bytes not streamed live …]"


@dataclass
class Piece:
    """One raw read: ``data`` from raw offset ``offset`` after a ``gap`` of skipped bytes;
    ``next`` the offset to ask next; ``complete`` once the attempt's log is final."""

    data: bytes
    offset: int
    gap: int
    next: int
    complete: bool
    status: str


class _Printer:
    """Writes log bytes to stdout, a gap as a line of its own."""

    def __init__(self) -> None:
        self.at_line_start = True
        self.written = 0  # bytes written, gap lines included

    def data(self, data: bytes) -> None:
        if data:
            self.written += len(data)
            sys.stdout.buffer.write(data)
            sys.stdout.flush()
            self.at_line_start = data.endswith(b"\n")

    def gap(self, count: int, capped: bool = False) -> None:
        if count > 0:
            prefix = "" if self.at_line_start else "\n"
            self.data(f"{prefix}{gap_line(count, capped)}\n".encode())


def read_raw(client: ControlClient, attempt_id: str, *, offset: int | None = None,
             tail: int | None = None, wait_s: int = 0) -> Piece:
    """One raw read (module docstring). Raises the client's typed errors; a control
    without the raw path answers 404 (ControlFailedError ``no such endpoint``) or ignores
    the parameters (no ``QL3-Log-Next``: ControlFailedError)."""
    params: dict[str, Any] = {"tail": tail} if tail is not None else {"offset": offset or 0}
    if wait_s:
        params["wait"] = wait_s
    response = client.request("GET", f"/v1/attempts/{attempt_id}/log", params=params,
                              timeout_s=wait_s + client.timeout_s)
    headers = response.headers
    if "QL3-Log-Next" not in headers:
        raise ControlFailedError("control answered the log without its offsets (an older "
                                 "release?)", client.urls[0])
    try:
        return Piece(data=response.content, offset=int(headers.get("QL3-Log-Offset", "0")),
                     gap=int(headers.get("QL3-Log-Gap", "0")),
                     next=int(headers["QL3-Log-Next"]),
                     complete=headers.get("QL3-Log-State") == "complete",
                     status=headers.get("QL3-Attempt-Status", ""))
    except ValueError:
        raise ControlFailedError("control answered malformed log offsets",
                                 client.urls[0]) from None


T = TypeVar("T")


def _retrying(call: Callable[[], T], follow: bool) -> T:
    """``call()``, retried for FOLLOW_RETRY_S while following when no replica answers."""
    if not follow:
        return call()
    give_up = time.monotonic() + FOLLOW_RETRY_S
    while True:
        try:
            return call()
        except (ControlUnreachableError, ControlNotReadyError, ControlFailedError) as exc:
            if time.monotonic() >= give_up or "no such endpoint" in str(exc):
                raise
            time.sleep(RETRY_PAUSE_S)


def last_lines(data: bytes, count: int) -> bytes:
    """The last ``count`` lines of ``data``, lines ending at ``\\n`` only: a ``\\r`` (a
    progress bar redrawing its line) stays inside its line, as a terminal shows it and as
    ``ql3 local logs --tail`` counts (``bytes.splitlines`` would split there too)."""
    pieces = data.split(b"\n")
    lines = [p + b"\n" for p in pieces[:-1]] + ([pieces[-1]] if pieces[-1] else [])
    return b"".join(lines[-count:])


def stream_attempt(client: ControlClient, attempt_id: str, printer: _Printer, *,
                   follow: bool, tail_lines: int | None) -> str:
    """Print an attempt's raw log from its start (or about ``tail_lines`` lines before its
    end); with ``follow`` until the log is complete, else what is there now. Returns the
    attempt's status as the last read named it."""
    offset = 0
    tail = None if tail_lines is None else max(4096, tail_lines * TAIL_BYTES_PER_LINE)
    first = True
    status = ""
    while True:
        piece: Piece = _retrying(partial(
            read_raw, client, attempt_id, offset=offset, tail=tail if first else None,
            wait_s=WAIT_S if follow and not first else 0), follow)
        status = piece.status or status
        data = piece.data
        if first and tail is not None:
            data = last_lines(data, tail_lines or 1)
        elif piece.gap:
            capped = piece.complete and status not in PARTIAL
            printer.gap(piece.gap, capped)
        printer.data(data)
        offset, first = piece.next, False
        if not piece.data and not piece.gap and (piece.complete or not follow):
            return status


def _print_stored(client: ControlClient, attempt: dict[str, Any], printer: _Printer,
                  tail: int | None) -> LogRetiredError | None:
    """A finished attempt: its stored log, or its partial log (saying it may be
    incomplete), or why there is none. Returns the retired error to raise at the end."""
    number = attempt["number"]
    try:
        data = client.request("GET", f"/v1/attempts/{attempt['id']}/log").content
    except LogRetiredError as exc:
        click.echo(f"the log of attempt {number} is gone (retired at "
                   f"{when(exc.retired_at)})", err=True)
        return LogRetiredError(f"the log of attempt {number} was retired by retention at "
                               f"{when(exc.retired_at)} ({exc.outcome})", exc.retired_at,
                               exc.outcome)
    except ControlNotFoundError as exc:
        if exc.error_code != "log_not_found":
            raise
        _print_partial(client, attempt, printer, tail)
        return None
    if tail is not None:
        data = last_lines(data, tail)
    printer.data(data)
    return None


def _ended(attempt: dict[str, Any]) -> str:
    why = attempt.get("reason")  # a lost attempt's reason may be "lost" again
    return str(attempt["status"]) + (f": {why}" if why and why != attempt["status"] else "")


def _print_partial(client: ControlClient, attempt: dict[str, Any], printer: _Printer,
                   tail: int | None) -> None:
    """What the worker streamed of an attempt that left no stored log."""
    number = attempt["number"]
    before = printer.written
    try:
        stream_attempt(client, attempt["id"], printer, follow=False, tail_lines=tail)
    except (ControlNotFoundError, ControlFailedError):
        click.echo(f"attempt {number} left no log ({_ended(attempt)})", err=True)
        return
    if printer.written == before:
        click.echo(f"attempt {number} left no log ({_ended(attempt)})", err=True)
        return
    if attempt.get("reason") == UNSTORED:
        return  # `logs` ends with LogUnavailableError's one line
    click.echo(f"attempt {number} ended {_ended(attempt)}: its log above may be incomplete",
               err=True)


def _unstored(attempts: list[dict[str, Any]]) -> LogUnavailableError | None:
    """The error for the first attempt whose log could not be stored, if any."""
    for attempt in attempts:
        if attempt.get("reason") == UNSTORED:
            return LogUnavailableError(int(attempt["number"]))
    return None


def status_line(run: dict[str, Any]) -> str:
    """``run backup#42 (<id>): succeeded (exit 0) in 1m 05s``."""
    return f"{output.describe_run(run)} in {output.run_duration(run)}"


def follow_run(client: ControlClient, run_id: str, tail: int | None) -> dict[str, Any]:
    """Follow the run's newest attempt, then the next one if the run is retried, until the
    run ends; its final view."""
    printer = _Printer()
    followed: set[str] = set()
    if tail is not None:  # only the newest attempt's last lines, then on
        first: dict[str, Any] = client.get(f"/v1/runs/{run_id}")
        followed = {a["id"] for a in first["attempts"][:-1]}
    while True:
        view: dict[str, Any] = _retrying(partial(client.get, f"/v1/runs/{run_id}"), True)
        attempts = [a for a in view["attempts"] if a["id"] not in followed]
        if view["status"] in TERMINAL and not attempts:
            return view
        if not attempts:
            time.sleep(QUEUED_POLL_S)
            continue
        attempt = attempts[0]
        followed.add(attempt["id"])
        if len(view["attempts"]) > 1:
            click.echo(f"== attempt {attempt['number']} ==", err=True)
        if attempt["status"] in TERMINAL and attempt["status"] not in PARTIAL:
            retired = _print_stored(client, attempt, printer, tail)  # as stored: its marker
            if retired is not None:
                raise retired
            tail = None
            continue
        try:
            status = stream_attempt(client, attempt["id"], printer, follow=True,
                                    tail_lines=tail)
        except (ControlNotFoundError, ControlFailedError) as exc:
            if isinstance(exc, ControlNotFoundError) and exc.error_code != "log_pending":
                raise
            _after_it_ends(client, run_id, attempt, printer, tail)
            tail = None
            continue
        tail = None
        if status in PARTIAL:
            click.echo(f"attempt {attempt['number']} ended {status}: its log above may be "
                       "incomplete", err=True)


def _after_it_ends(client: ControlClient, run_id: str, attempt: dict[str, Any],
                   printer: _Printer, tail: int | None) -> None:
    """A control without the raw path (a release before live logs): say so, wait for the
    attempt to end, then print its stored log."""
    number = attempt["number"]
    click.echo(f"control does not stream logs (older release): attempt {number} is shown "
               "when it ends", err=True)
    while True:
        view: dict[str, Any] = _retrying(partial(client.get, f"/v1/runs/{run_id}"), True)
        now = next((a for a in view["attempts"] if a["id"] == attempt["id"]), attempt)
        if now["status"] in TERMINAL:
            break
        time.sleep(QUEUED_POLL_S)
    if now["status"] in PARTIAL:
        click.echo(f"attempt {number} left no log ({_ended(now)})", err=True)
        return
    retired = _print_stored(client, now, printer, tail)
    if retired is not None:
        raise retired


@click.command("logs", epilog=RUN_HELP)
@click.argument("ref", metavar="RUN")
@click.option("-f", "--follow", is_flag=True,
              help="Follow the newest attempt as it runs (and the next one if the run is "
                   "retried) until the run ends; then a status line, and exit 0 only if the "
                   "run succeeded, as `run --wait` does.")
@click.option("--tail", type=click.IntRange(1, 100_000), default=None, metavar="N",
              help="Only the last N lines of the newest attempt (with -f: then follow).")
@display_options
@connection
def logs(ref: str, follow: bool, tail: int | None, client: ControlClient) -> None:
    """Print the output of run RUN, every attempt's in order. A running attempt shows what
    its worker has streamed so far (-f follows it). A lost attempt shows what was streamed,
    said to be possibly incomplete, and when it is the newest attempt the exit code is 1.
    Bytes not streamed live (a flood past the worker's rate)
    print as one line `[… N bytes not streamed live …]`. A log retired by retention is named
    with when it was retired, and the exit code is then 1. An attempt whose log could not be
    stored (the object store was unavailable) shows what was streamed, and the command
    ends with one line saying the log may be incomplete and exits 1 (also with -f)."""
    view = client.get(f"/v1/runs/{resolve_run(client, ref)['id']}", run=ref)
    if follow:
        final = follow_run(client, view["id"], tail)
        click.echo(status_line(final), err=True)
        unstored = _unstored(final["attempts"])
        if unstored is not None:
            raise unstored
        if final["status"] != "succeeded":
            raise RunNotSucceededError(f"the run ended {final['status']}")
        return
    attempts: list[dict[str, Any]] = view["attempts"]
    if not attempts:
        click.echo(f"run {output.ref(view)} has no attempt yet ({view['status']})", err=True)
        return
    retired: LogRetiredError | LogUnavailableError | None = None
    printer = _Printer()
    for attempt in attempts[-1:] if tail is not None else attempts:
        number = attempt["number"]
        if len(attempts) > 1:
            click.echo(f"== attempt {number} ==", err=True)
        if attempt["status"] in LIVE:
            try:
                stream_attempt(client, attempt["id"], printer, follow=False, tail_lines=tail)
            except ControlFailedError:  # a control before live logs
                click.echo(f"attempt {number} is {attempt['status']}: its log is uploaded "
                           "when it ends", err=True)
                continue
            click.echo(f"attempt {number} is {attempt['status']}: shown so far "
                       f"(ql3 cluster logs {ref} -f follows it)", err=True)
            continue
        if attempt["status"] in PARTIAL:
            _print_partial(client, attempt, printer, tail)
            continue
        retired = _print_stored(client, attempt, printer, tail) or retired
    retired = retired or _unstored(attempts[-1:] if tail is not None else attempts)
    if retired is not None:
        raise retired
    if attempts[-1]["status"] in PARTIAL:  # the newest attempt's log may be incomplete
        raise RunNotSucceededError(f"attempt {attempts[-1]['number']} ended "
                                   f"{attempts[-1]['status']}: its log may be incomplete")
