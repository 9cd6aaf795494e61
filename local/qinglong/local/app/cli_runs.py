"""``ql3 local run|runs|logs|cancel|recovery``."""

from __future__ import annotations

import sys
import time
from typing import Any

import click

from qinglong.local.app import output
from qinglong.local.app.backend import BUSY_WAIT_S, open_backend
from qinglong.local.app.cli_common import (
    data_dir_option,
    datadir_of,
    json_option,
    print_json,
    wait_terminal,
)
from qinglong.local.app.client import ServerUnavailableError, SocketBackend
from qinglong.local.app.display import display_options
from qinglong.shared.errors import DataDirectoryBusyError, RunNotSucceededError
from qinglong.shared.statuses import RunStatus

FOLLOW_POLL_S = 0.3


@click.command("run")
@click.argument("name")
@click.option("--wait", is_flag=True, help="Return only when the run is terminal.")
@data_dir_option
@json_option
def run(name: str, wait: bool, data_dir: str | None, as_json: bool) -> None:
    """Run task NAME now.

    Through a running `ql3 local serve` the run is queued there (--wait waits for it).
    With no serve running this command supervises the run in the foreground until it
    ends, printing its output as it is written (not with --json), and serves the data
    directory to other `ql3 local` commands meanwhile. Ctrl-C cancels the run (TERM, grace,
    KILL) and exits 130. Once the run has ended, the exit code is 0 only if it succeeded
    (1 otherwise), so `ql3 local run X --wait && next` works.
    """
    from qinglong.local.app.foreground import run_in_foreground

    datadir = datadir_of(data_dir)
    datadir.require_initialised()
    interrupted_by = None
    deadline = time.monotonic() + BUSY_WAIT_S
    while True:
        if SocketBackend.probe(datadir.socket_path):
            backend = SocketBackend(datadir.socket_path)
            view = backend.call("run_now", name=name)
            if wait:
                view = wait_terminal(backend, view["id"])
            break
        try:
            result = run_in_foreground(
                datadir, name, stream=None if as_json else sys.stdout.buffer,
                say=lambda text: click.echo(text, err=True))
        except DataDirectoryBusyError:  # raised before anything is queued
            if time.monotonic() >= deadline:  # a short-lived command owns it for a moment
                raise
            time.sleep(0.1)
            continue
        view, interrupted_by = result.view, result.interrupted_by
        break
    if as_json:
        print_json(view)
    else:
        click.echo(output.describe_run(view))
    if interrupted_by is not None:  # Ctrl-C: 130, as shells report an interrupted command
        click.echo(f"ql3: interrupted: the run ended {view['status']}", err=True)
        sys.exit(128 + interrupted_by)
    if view["status"] in output.TERMINAL and view["status"] != "succeeded":
        failure = output.launch_failure(view)
        raise RunNotSucceededError(f"the run ended {view['status']}"
                                   + (f" ({failure})" if failure else ""))


@click.command("runs")
@click.option("--task", "task_name", default=None, metavar="NAME", help="Only this task's runs.")
@click.option("--limit", type=click.IntRange(1, 1000), default=20, show_default=True)
@click.option("--status", type=click.Choice([s.value for s in RunStatus]), default=None,
              metavar="STATUS",
              help=f"Only runs in this status: {', '.join(s.value for s in RunStatus)}.")
@display_options
@data_dir_option
@json_option
def runs(
    task_name: str | None, limit: int, status: str | None, data_dir: str | None, as_json: bool
) -> None:
    """List runs, newest first: BACKUP#N, short id, status, exit code, start, duration.

    Any run shown can be named as TASK#N, TASK@last or by the last 6+ hex digits of its
    id in `logs`, `inspect` and `cancel`.
    """
    with open_backend(datadir_of(data_dir), "runs") as backend:
        views = backend.call("runs", task=task_name, limit=limit, status=status)
    if as_json:
        print_json(views)
    else:
        output.print_runs(views)


RUN_HELP = "RUN is a run id, TASK#N, TASK@last, or the last 6+ hex digits of a run id."


@click.command("inspect", epilog=RUN_HELP)
@click.argument("run_id", metavar="RUN")
@display_options
@data_dir_option
@json_option
def inspect(run_id: str, data_dir: str | None, as_json: bool) -> None:
    """Show one run RUN: attempts, handles and its event history."""
    with open_backend(datadir_of(data_dir), "inspect") as backend:
        view = backend.call("run_get", run_id=run_id)
    if as_json:
        print_json(view)
        return
    click.echo(output.describe_run(view))  # ends with the leftovers note, if any
    for attempt in view["attempts"]:
        click.echo("  " + output.describe_attempt(attempt))
    for event in view["events"]:
        click.echo("  " + output.describe_event(event))


@click.command("cancel", epilog=RUN_HELP)
@click.argument("run_id", metavar="RUN")
@click.option("--wait", is_flag=True,
              help="Through a running owner, wait until the run has ended (exit 0 only if "
                   "it ended cancelled).")
@data_dir_option
@json_option
def cancel(run_id: str, wait: bool, data_dir: str | None, as_json: bool) -> None:
    """Cancel run RUN if queued or running (TERM, grace, KILL to its process group).

    Through the owner of the data directory (`ql3 local serve` or a foreground
    `ql3 local run`) the owner stops the run: this prints "cancel requested", and with
    --wait waits for the run to end. With no owner running, this command stops the run's
    process group itself and records the outcome before it returns. The exit code is 0
    only when the run ended cancelled (or, without --wait, once the owner has the request);
    otherwise 1, saying why.
    """
    from qinglong.local.app.cancel import cancel_without_owner

    datadir = datadir_of(data_dir)
    datadir.require_initialised()
    deadline = time.monotonic() + BUSY_WAIT_S
    requested = False
    while True:
        if SocketBackend.probe(datadir.socket_path):
            backend = SocketBackend(datadir.socket_path)
            if not requested:
                view = backend.call("cancel", run_id=run_id)
                requested = True
                if not wait:  # the owner has the request; it stops the run
                    if as_json:
                        print_json(view)
                    else:
                        click.echo(f"cancel requested: {output.describe_run(view)}")
                    return
                click.echo(f"cancel requested: {output.describe_run(view)}", err=True)
            try:
                view = wait_terminal(backend, run_id)
                break
            except ServerUnavailableError:  # the owner ended meanwhile (a foreground run
                continue  # whose run this was): read the outcome, or stop it here
        try:
            view = cancel_without_owner(datadir, run_id, resume=requested,
                                        say=lambda text: click.echo(text, err=True))
            break
        except DataDirectoryBusyError:
            if time.monotonic() >= deadline:  # a short-lived command owns it for a moment
                raise
            time.sleep(0.1)
    if as_json:
        print_json(view)
    else:
        click.echo(output.describe_run(view))
    leftovers = view.get("leftovers") or {}
    if view["status"] != "cancelled":
        raise RunNotSucceededError(f"the run ended {view['status']}, not cancelled")
    if leftovers.get("unresolved"):
        raise RunNotSucceededError("the run ended cancelled, but processes it left still hold "
                                   "its attempt lock (`ql3 local inspect` shows the events)")


@click.command("logs", epilog=RUN_HELP)
@click.argument("run_id", metavar="RUN")
@click.option("--follow", "-f", is_flag=True, help="Keep printing output until the run ends.")
@click.option("--tail", "tail", type=click.IntRange(1, 100_000), default=None, metavar="N",
              help="Start at the last N lines of the newest attempt.")
@display_options
@data_dir_option
def logs(run_id: str, follow: bool, tail: int | None, data_dir: str | None) -> None:
    """Print the output of run RUN (every attempt's, in order).

    With --follow, keep printing until the run ends, then print one status line on stderr
    (status, exit code, duration); the exit code is then 0 only if the run succeeded (1
    otherwise), as `run --wait` gives.
    """
    position: list[int] | None = None  # attempt number, byte offset: kept across owners
    while True:
        try:
            with open_backend(datadir_of(data_dir), "logs") as backend:
                if position is None:  # resolve the reference once; then read by full id
                    if tail is None:
                        run_id = backend.call("run_get", run_id=run_id)["id"]
                        position = [1, 0]
                    else:
                        start = backend.call("logs_tail", run_id=run_id, lines=tail)
                        run_id = start["run_id"]
                        position = [start["attempt"], start["offset"]]
                _print_logs(backend, run_id, follow, position)
                final = backend.call("run_get", run_id=run_id) if follow else None
            break
        except ServerUnavailableError:  # the owner ended (a foreground run): go on from
            continue  # whoever owns the data directory now
    if final is not None:
        click.echo(output.follow_end_line(final), err=True)
        if final["status"] != "succeeded":
            sys.exit(1)


def _print_logs(backend: Any, run_id: str, follow: bool, position: list[int]) -> None:
    """Print from ``position`` (attempt number, offset; advanced as it prints)."""
    while True:
        number, offset = position
        chunk = backend.call("logs_read", run_id=run_id, attempt=number, offset=offset)
        # retired by retention, not an error (docs/protocols.md §3.8)
        if chunk.get("retired_at"):
            click.echo(f"the log of attempt {number} is gone "
                       f"(retired at {output.when(chunk['retired_at'])})", err=True)
        if offset == 0 and (number > 1 or chunk["attempts"] > 1) and chunk["data"]:
            click.echo(f"== attempt {number} ==", err=True)
        if chunk.get("gap"):  # the cap left these bytes out: say so once, go on after them
            sys.stdout.flush()
            click.echo(output.gap_notice(chunk["gap"]), err=True)
            position[1] = chunk["offset"]
            continue
        if chunk["data"]:
            sys.stdout.buffer.write(chunk["data"].encode("utf-8", "surrogateescape"))
            sys.stdout.flush()
            position[1] = chunk["offset"]
            continue
        if number < chunk["attempts"]:
            position[:] = [number + 1, 0]
            continue
        if not follow or chunk["done"]:
            break
        time.sleep(FOLLOW_POLL_S)


@click.group()
def recovery() -> None:
    """Startup recovery state (runs left active by a stopped owner)."""


@recovery.command("status")
@click.option("--verbose", "-v", is_flag=True,
              help="Per run: its task and each active attempt's process, receipt and lock.")
@data_dir_option
@json_option
def recovery_status(verbose: bool, data_dir: str | None, as_json: bool) -> None:
    """Show runs that a stopped owner left in dispatching/running."""
    with open_backend(datadir_of(data_dir), "recovery status") as backend:
        view = backend.call("recovery_status", verbose=verbose)
    if as_json:
        print_json(view)
        return
    more = " (or more)" if view["truncated"] else ""
    click.echo(f"{view['candidates']}{more} run(s) in dispatching/running, "
               f"{view['active_attempts']} active attempt(s)")
    details = {d["run_id"]: d for d in view.get("details", [])}
    for run_id in view["runs"]:
        detail = details.get(run_id)
        click.echo(f"  {run_id}" + (f"  task {detail['task']} ({detail['status']})"
                                     if detail else ""))
        for ev in (detail or {}).get("attempts", []):
            holders = ", ".join(map(str, ev.get("lock_holders") or []))
            why = {k: f" ({ev[k + '_unreadable']})" if k + "_unreadable" in ev else ""
                   for k in ("receipt", "lock")}
            click.echo(f"    attempt {ev['attempt']} {ev['status']}: process {ev['process']}, "
                       f"receipt {ev['receipt']}{why['receipt']}, lock {ev['lock']}"
                       f"{why['lock']}" + (f" (held by pids {holders})" if holders else ""))
    unresolved = view.get("leftovers_unresolved", [])
    if unresolved:
        click.echo(f"{len(unresolved)} ended run(s) with unresolved leftovers: processes they "
                   "left still hold the attempt lock and cannot be found "
                   "(`ql3 local inspect RUN_ID` shows the events)")
    for run_id in unresolved:
        click.echo(f"  {run_id}")
    if view["runs"] and not view["supervised"]:
        click.echo("`ql3 local serve` settles these from their receipts and process identity "
                   "at start; `ql3 local recovery resolve RUN_ID... --as lost|failed` settles "
                   "one by hand (a published receipt wins)")


@recovery.command("resolve")
@click.argument("run_ids", nargs=-1, required=True)
@click.option("--as", "verdict", type=click.Choice(["lost", "failed"]), required=True,
              help="Status to record when no receipt tells the real outcome.")
@data_dir_option
@json_option
def recovery_resolve(
    run_ids: tuple[str, ...], verdict: str, data_dir: str | None, as_json: bool
) -> None:
    """Settle runs a stopped owner left in dispatching/running.

    A published completion receipt wins (the run gets its real exit code); a process of the
    run that may still be alive refuses the resolution; otherwise the run is recorded as
    --as lost|failed. A corrupt stored handle is never used: the attempt lock alone
    decides (held refuses, free settles). Each resolution is an event naming who and when.
    Each run is resolved on its own: a refused run is named on stderr, the others are still
    settled, and the exit code is 1 if any was refused.
    """
    with open_backend(datadir_of(data_dir), "recovery resolve") as backend:
        results = backend.call("recovery_resolve", run_ids=list(run_ids), **{"as": verdict})
    if as_json:
        print_json(results)
    for item in results:
        if item.get("refused"):  # each refusal on stderr; the other runs are still settled
            click.echo(f"ql3: error: run {item['run_id']}: {item['refused']['message']}",
                       err=True)
        elif not as_json:
            click.echo(f"run {item['run_id']}: {item['status']} (from {item['source']})")
    if any(item.get("refused") for item in results):
        sys.exit(1)
