"""``ql3 cluster``: drive a cluster through its control API (docs/protocols.md §4.5; issue 13
item 2). HTTP only: no database, bucket or worker code is imported (import-linter holds it).

Same conventions as ``ql3 local``: 80-column tables (``COLUMNS``; ``--wide``), local times
with offsets (``--utc``), runs named ``TASK#N``, ``TASK@last`` or by the last 6+ hex digits
of their id, ``--json`` in ISO-8601 UTC. Exit codes: 0 success; 2 usage error, bad input or
an unknown task or run; 1 any other error (control unreachable, token refused, a scope
missing, a conflict, a retired log, control not ready), each one line on stderr, never a
traceback and never the token. ``run --wait`` and ``cancel --wait`` exit 1 when the run ended
otherwise than asked.

Resolved lazily by ``ql3`` (``local/app/cli.py``), so ``ql3 local`` never loads httpx.
"""

from __future__ import annotations

import click

from qinglong.client import output
from qinglong.client.cli_common import (
    connection,
    display_options,
    json_option,
    print_json,
    resolve_run,
    segment,
    wait_terminal,
)
from qinglong.client.http import ControlClient
from qinglong.shared.errors import QinglongError, RunNotSucceededError

RUN_STATUSES = ("queued", "dispatching", "running", "succeeded", "failed", "cancelled",
                "timed_out", "lost")
RUN_HELP = "RUN is a run id, TASK#N, TASK@last, or the last 6+ hex digits of a run id."


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def cluster() -> None:
    """The cluster through its control API: tasks, script bundles, runs, logs, workers.

    Give control's base URL with --control-url or QL3_CONTROL_URL (several replicas:
    comma-separated) and a token in QL3_TOKEN (`ql3 control token create`): viewer reads,
    operator runs, cancels, enables and disables and pushes and removes script bundles,
    admin adds, edits and removes tasks.
    """


@cluster.command("run")
@click.argument("name")
@click.option("--wait", is_flag=True, help="Return when the run has ended; exit 0 only if it "
                                           "succeeded.")
@json_option
@connection
def run(name: str, wait: bool, as_json: bool, client: ControlClient) -> None:
    """Queue a run of task NAME now (its concurrency policy applies: a forbid task with a
    run active refuses). With --wait, wait for the run's end: the exit code is the run's
    outcome, so `ql3 cluster run X --wait && next` works. Ctrl-C stops waiting, not the run.
    The request carries a fresh Idempotency-Key (a UUID) and is sent again with it when
    its answer is lost, so a retry never queues a second run."""
    import uuid

    _, created = client.send("POST", f"/v1/tasks/{segment(name)}/run", task=name,
                             idempotency_key=str(uuid.uuid4()))
    line = f"queued run {name}#{created['number']} ({created['id']})"
    hint = no_worker_hint(client, name)
    if not wait:
        print_json(created) if as_json else click.echo(line)
        if hint:
            click.echo(f"warning: {hint}", err=True)
        return
    click.echo(line + "; waiting for it to end", err=True)
    if hint:
        click.echo(f"warning: {hint}", err=True)
    view = wait_terminal(client, created["id"])
    print_json(view) if as_json else click.echo(output.describe_run(view))
    if view["status"] != "succeeded":
        raise RunNotSucceededError(f"the run ended {view['status']}")


@cluster.command("runs")
@click.option("--task", "task_name", default=None, metavar="NAME", help="Only this task's runs "
              "(also of a task removed and added again under the name).")
@click.option("--status", type=click.Choice(RUN_STATUSES), default=None, metavar="STATUS",
              help=f"Only runs in this status: {', '.join(RUN_STATUSES)}.")
@click.option("--limit", type=click.IntRange(1, 1000), default=20, show_default=True)
@display_options
@json_option
@connection
def runs(task_name: str | None, status: str | None, limit: int, as_json: bool,
         client: ControlClient) -> None:
    """List runs, newest first: TASK#N, short id, status, exit code, start, duration.
    --task of a name that is no live task and has no runs is refused (exit 2)."""
    items = client.items("/v1/runs", {"task": task_name, "status": status}, limit=limit)
    # control answers an empty page for a name it has no runs of: the name is known if a
    # live task has it or a run (of a task since removed) does, in any status
    if not items and task_name is not None and (
            status is None or not client.items("/v1/runs", {"task": task_name}, limit=1)):
        client.get(f"/v1/tasks/{segment(task_name)}", task=task_name)  # 404: no such task
    print_json(items) if as_json else output.print_runs(items)


@cluster.command("inspect", epilog=RUN_HELP)
@click.argument("ref", metavar="RUN")
@display_options
@json_option
@connection
def inspect(ref: str, as_json: bool, client: ControlClient) -> None:
    """Show run RUN: its attempts (worker, exit, reason) and its event history."""
    view = client.get(f"/v1/runs/{resolve_run(client, ref)['id']}", run=ref)
    if as_json:
        print_json(view)
        return
    output.print_inspect(view)
    if view["status"] == "queued" and (hint := no_worker_hint(client, view["task_name"])):
        click.echo(f"waiting: {hint}")


def no_worker_hint(client: ControlClient, task_name: str) -> str | None:
    """Why a queued run of ``task_name`` would wait for ever, in words, or None: no live
    worker at all, or none declaring the task's labels (a task runs only on workers whose
    labels include its own; docs/protocols.md §4.2). Reads the task and the live workers
    (viewer scope). Advisory: a task removed meanwhile, or any error of these reads, gives
    None (the command's own answer stands)."""
    try:
        task = client.get(f"/v1/tasks/{segment(task_name)}", task=task_name)
        live = client.items("/v1/workers", {"state": "live"}, limit=1000)
    except QinglongError:
        return None
    wanted: dict[str, str] = task.get("labels") or {}
    if not live:
        return "no worker is live: the run waits until one registers"
    if any(wanted.items() <= (w.get("labels") or {}).items() for w in live):
        return None
    return f"no live worker has the labels {output.labels(wanted)}: the run waits for one"


@cluster.command("cancel", epilog=RUN_HELP)
@click.argument("ref", metavar="RUN")
@click.option("--wait", is_flag=True, help="Wait until the run has ended (exit 0 only if it "
                                           "ended cancelled).")
@json_option
@connection
def cancel(ref: str, wait: bool, as_json: bool, client: ControlClient) -> None:
    """Cancel run RUN: a queued run ends cancelled at once; a running one is asked to stop
    (its worker learns it at its next heartbeat: TERM, grace, KILL to the process group).
    A finished run is refused (exit 1)."""
    target = resolve_run(client, ref)
    status, view = client.send("POST", f"/v1/runs/{target['id']}/cancel", run=ref)
    done = "cancelled" if status == 200 else "cancel requested"
    line = f"{done}: {output.describe_run(view)}"
    if not wait:
        print_json(view) if as_json else click.echo(line)
        return
    click.echo(line, err=True)
    view = wait_terminal(client, target["id"])
    print_json(view) if as_json else click.echo(output.describe_run(view))
    if view["status"] != "cancelled":
        raise RunNotSucceededError(f"the run ended {view['status']}, not cancelled")


@cluster.command("occurrences")
@click.argument("name")
@click.option("--limit", type=click.IntRange(1, 1000), default=20, show_default=True)
@display_options
@json_option
@connection
def occurrences(name: str, limit: int, as_json: bool, client: ControlClient) -> None:
    """What became of each slot of task NAME, newest first: run_created (its run) or why no
    run was created (skipped_active, backlog_full, skipped_downtime, skipped_disabled);
    consecutive equal skips are one line."""
    items = client.items(f"/v1/tasks/{segment(name)}/occurrences", limit=limit, task=name)
    print_json(items) if as_json else output.print_occurrences(items)


@cluster.command("workers")
@click.option("--state", type=click.Choice(["live", "silent", "stopped"]), default=None,
              help="live: heard from within a lease; silent: not since (killed or cut off); "
                   "stopped: drained and gone.")
@click.option("--limit", type=click.IntRange(1, 1000), default=50, show_default=True)
@display_options
@json_option
@connection
def workers(state: str | None, limit: int, as_json: bool, client: ControlClient) -> None:
    """Worker incarnations, newest first (one per worker process start): name, id, state,
    when control last heard from it, attempts it holds now, labels."""
    items = client.items("/v1/workers", {"state": state}, limit=limit)
    print_json(items) if as_json else output.print_workers(items)


from qinglong.client import cli_logs, cli_notify, cli_scripts, cli_tasks, cli_vars  # noqa: E402

cluster.add_command(cli_logs.logs)
cluster.add_command(cli_tasks.task)
cluster.add_command(cli_scripts.script)
cluster.add_command(cli_vars.vars_group)
cluster.add_command(cli_notify.notify_group)
