"""``ql3 local run|runs|logs|cancel|recovery``."""

from __future__ import annotations

import signal
import sys
import threading
import time
from typing import Any

import click

from qinglong.local.app import output
from qinglong.local.app.backend import open_backend
from qinglong.local.app.cli_common import (
    RunNotSucceededError,
    data_dir_option,
    datadir_of,
    json_option,
    print_json,
    wait_terminal,
)
from qinglong.local.app.client import SocketBackend
from qinglong.local.app.datadir import DataDir

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
    ends (Ctrl-C cancels it), because nobody else would. Once the run has ended, the exit
    code is 0 only if it succeeded (1 otherwise), so `ql3 local run X --wait && next` works.
    """
    datadir = datadir_of(data_dir)
    datadir.require_initialised()
    if SocketBackend.probe(datadir.socket_path):
        backend = SocketBackend(datadir.socket_path)
        view = backend.call("run_now", name=name)
        if wait:
            view = wait_terminal(backend, view["id"])
    else:
        view = _run_in_foreground(datadir, name)
    if as_json:
        print_json(view)
    else:
        click.echo(output.describe_run(view))
    if view["status"] in output.TERMINAL and view["status"] != "succeeded":
        failure = output.launch_failure(view)
        raise RunNotSucceededError(f"the run ended {view['status']}"
                                   + (f" ({failure})" if failure else ""))


def _run_in_foreground(datadir: DataDir, name: str) -> dict[str, Any]:
    from qinglong.local.app.application import LocalStack, LocalStore

    store = LocalStore(datadir, "run")
    stop = threading.Event()
    previous = {
        sig: signal.signal(sig, lambda *_: stop.set())
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    }
    try:
        stack = LocalStack(store)
        stack.recover()  # earlier runs still alive are supervised (deadlines) meanwhile
        service = stack.service()
        queued = service.run_now(name)
        click.echo(
            f"no `ql3 local serve` is running: supervising run {queued['id']} "
            "in the foreground until it ends",
            err=True,
        )
        stack.supervise(queued["id"], stop)
        stack.coordinator.detach(5.0)  # re-attached runs of others go on; serve takes them
        return service.run_get(queued["id"])
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        store.close()


@click.command("runs")
@click.option("--task", "task_name", default=None, metavar="NAME", help="Only this task's runs.")
@click.option("--limit", type=click.IntRange(1, 1000), default=20, show_default=True)
@data_dir_option
@json_option
def runs(task_name: str | None, limit: int, data_dir: str | None, as_json: bool) -> None:
    """List runs, newest first, with status and exit code."""
    with open_backend(datadir_of(data_dir), "runs") as backend:
        views = backend.call("runs", task=task_name, limit=limit)
    if as_json:
        print_json(views)
    else:
        output.print_runs(views)


@click.command("inspect")
@click.argument("run_id")
@data_dir_option
@json_option
def inspect(run_id: str, data_dir: str | None, as_json: bool) -> None:
    """Show one run: attempts, handles and its event history."""
    with open_backend(datadir_of(data_dir), "inspect") as backend:
        view = backend.call("run_get", run_id=run_id)
    if as_json:
        print_json(view)
        return
    click.echo(output.describe_run(view))  # ends with the leftovers note, if any
    for attempt in view["attempts"]:
        click.echo(f"  attempt {attempt['number']}: {attempt['status']} exit "
                   f"{attempt['exit_code']} handle {attempt['handle']}")
    for event in view["events"]:
        click.echo(f"  {event['at']} {event['kind']} {event['detail'] or ''}")


@click.command("cancel")
@click.argument("run_id")
@data_dir_option
@json_option
def cancel(run_id: str, data_dir: str | None, as_json: bool) -> None:
    """Cancel a queued or running run (TERM, grace, KILL)."""
    with open_backend(datadir_of(data_dir), "cancel") as backend:
        view = backend.call("cancel", run_id=run_id)
    if as_json:
        print_json(view)
    else:
        click.echo(output.describe_run(view))


@click.command("logs")
@click.argument("run_id")
@click.option("--follow", "-f", is_flag=True, help="Keep printing output until the run ends.")
@data_dir_option
def logs(run_id: str, follow: bool, data_dir: str | None) -> None:
    """Print a run's output (every attempt's, in order)."""
    with open_backend(datadir_of(data_dir), "logs") as backend:
        number, offset = 1, 0
        while True:
            chunk = backend.call("logs_read", run_id=run_id, attempt=number, offset=offset)
            if chunk.get("retired_at"):  # DESIGN.md §3.8: retired by retention, not an error
                click.echo(f"the log of attempt {number} is gone "
                           f"(retired at {chunk['retired_at']})", err=True)
            if offset == 0 and (number > 1 or chunk["attempts"] > 1) and chunk["data"]:
                click.echo(f"== attempt {number} ==", err=True)
            if chunk["data"]:
                sys.stdout.buffer.write(chunk["data"].encode("utf-8", "surrogateescape"))
                sys.stdout.flush()
                offset = chunk["offset"]
                continue
            if number < chunk["attempts"]:
                number, offset = number + 1, 0
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
