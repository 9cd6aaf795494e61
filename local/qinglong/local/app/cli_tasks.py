"""``ql3 local task ...``: add, edit, list, show, next, enable, disable, rm."""

from __future__ import annotations

import unicodedata
from typing import Any

import click

from qinglong.local.app import output
from qinglong.local.app.backend import open_backend
from qinglong.local.app.cli_common import data_dir_option, datadir_of, json_option, print_json
from qinglong.local.app.cli_vars import read_secret_env, secret_env_option
from qinglong.local.app.display import display_options
from qinglong.shared.display import natural_key
from qinglong.shared.errors import ValidationError


@click.group()
def task() -> None:
    """Manage task definitions."""


def _parse_env(pairs: tuple[str, ...]) -> dict[str, str]:
    """``--env K=V`` pairs as a mapping. Raises click.BadParameter (exit 2) on a pair without
    ``=`` or a name given twice (which value was meant is not ours to guess); the message
    names the variable, never a value."""
    env: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep:
            raise click.BadParameter("use K=V", param_hint="--env")
        if name in env:
            raise click.BadParameter(f"{name} is given twice; give each variable once",
                                     param_hint="--env")
        env[name] = value
    return env


@task.command("add", context_settings={"ignore_unknown_options": False})
@click.argument("name")
@click.option("--schedule", required=True, metavar="CRON",
              help="5-field cron, 6 fields with seconds first, @boot or @once.")
@click.option("--timezone", default=None, metavar="TZ",
              help="IANA time zone the schedule is read in [default: this machine's zone, "
                   "from TZ or /etc/localtime, else UTC].")
@click.option("--timeout", type=float, default=None, metavar="SECONDS",
              help="Stop the attempt after this many seconds (TERM, grace, KILL).")
@click.option("--max-attempts", type=int, default=1, show_default=True,
              help="Attempts per run; failed, timed-out or lost attempts retry with backoff.")
@click.option("--concurrency", type=click.Choice(["forbid", "allow", "replace"]),
              default="forbid", show_default=True,
              help="A due slot while a run is active: skip it, run both, or replace.")
@click.option("--env", "env_pairs", multiple=True, metavar="K=V",
              help="Environment variable (shown in task show; PATH here replaces the default).")
@secret_env_option
@click.option("--cwd", default=None, metavar="DIR", help="Absolute working directory.")
@click.option("--label", "labels", multiple=True, help="Free-form label (repeatable).")
@click.option("--no-check", is_flag=True,
              help="Add it even when the script path it runs does not exist (yet).")
@click.argument("argv", nargs=-1, required=True)
@data_dir_option
@json_option
def task_add(
    name: str,
    schedule: str,
    timezone: str | None,
    timeout: float | None,
    max_attempts: int,
    concurrency: str,
    env_pairs: tuple[str, ...],
    secret_env: tuple[str, ...],
    cwd: str | None,
    labels: tuple[str, ...],
    no_check: bool,
    argv: tuple[str, ...],
    data_dir: str | None,
    as_json: bool,
) -> None:
    """Register task NAME running ARGV (write it after `--`) on a schedule.

    Example: ql3 local task add backup --schedule '0 3 * * *' -- /usr/local/bin/backup.sh

    A task's PATH is systemd's default list (or the data directory's task_path setting)
    unless --env PATH=... gives its own. Without --timezone the schedule is read in this
    machine's zone (TZ, else /etc/localtime), else UTC with a note.
    """
    if timezone is None:
        from qinglong.shared.zones import machine_zone

        timezone, note = machine_zone()
        if note is not None:
            click.echo(f"note: {note}", err=True)
    spec = {
        "name": name,
        "argv": list(argv),
        "schedule": schedule,
        "timezone": timezone,
        "env": _parse_env(env_pairs),
        "cwd": cwd,
        "timeout_s": timeout,
        "max_attempts": max_attempts,
        "concurrency": concurrency,
        "labels": list(labels),
        "secret_env": read_secret_env(secret_env),
    }
    if not argv:
        raise ValidationError("argv", "the command must not be empty")
    _check_script(argv, cwd, no_check)
    with open_backend(datadir_of(data_dir), "task add") as backend:
        view = backend.call("task_add", spec=spec)
    if as_json:
        print_json(view)
    else:
        click.echo(f"added task {view['name']} ({view['id']})")


def _check_script(argv: tuple[str, ...], cwd: str | None, no_check: bool) -> None:
    """The script path of ``argv`` (``shared/script_paths.py``): a relative one is added
    with a warning on stderr naming where it will be looked up; a missing absolute one is
    refused (ValidationError, exit 2) unless ``no_check``."""
    from qinglong.shared.script_paths import check_script

    try:
        warning = check_script(argv, cwd)
    except FileNotFoundError as exc:
        if not no_check:
            raise ValidationError("argv", f"{exc}: give --no-check to add it anyway") from None
        return
    if warning is not None:
        click.echo(f"warning: {warning}", err=True)


def _optional_number(value: str | None, option: str, kind: type[float] | type[int]) -> object:
    """``none`` -> None (cleared); a number -> that number; anything else: a usage error."""
    if value is None or value.lower() == "none":
        return None
    try:
        return kind(value)
    except ValueError:
        raise click.BadParameter("a number, or 'none'", param_hint=option) from None


@task.command("edit")
@click.argument("name")
@click.option("--name", "new_name", default=None, metavar="NEW",
              help="Rename the task (runs and history stay its own).")
@click.option("--schedule", default=None, metavar="CRON",
              help="New schedule: 5-field cron, 6 fields with seconds first, @boot or @once.")
@click.option("--timezone", default=None, metavar="TZ", help="New IANA time zone.")
@click.option("--timeout", default=None, metavar="SECONDS|none",
              help="New timeout in seconds, or 'none' for no timeout.")
@click.option("--max-attempts", type=int, default=None, help="New attempts per run.")
@click.option("--concurrency", type=click.Choice(["forbid", "allow", "replace"]),
              default=None, help="New policy for a due slot while a run is active.")
@click.option("--env", "env_pairs", multiple=True, metavar="K=V",
              help="Set an environment variable (repeatable).")
@click.option("--unset-env", "env_unset", multiple=True, metavar="K",
              help="Remove an environment variable (repeatable).")
@secret_env_option
@click.option("--unset-secret-env", "secret_unset", multiple=True, metavar="NAME",
              help="Remove a secret environment variable (repeatable).")
@click.option("--label", "labels_add", multiple=True, metavar="LABEL",
              help="Add a free-form label (repeatable).")
@click.option("--unset-label", "labels_unset", multiple=True, metavar="LABEL",
              help="Remove a label (repeatable).")
@click.option("--cwd", default=None, metavar="DIR|none",
              help="New absolute working directory, or 'none' for the default (home).")
@click.option("--no-check", is_flag=True,
              help="Take a new command even when the script path it runs does not exist.")
@click.argument("argv", nargs=-1)
@data_dir_option
@json_option
def task_edit(
    name: str,
    new_name: str | None,
    schedule: str | None,
    timezone: str | None,
    timeout: str | None,
    max_attempts: int | None,
    concurrency: str | None,
    env_pairs: tuple[str, ...],
    env_unset: tuple[str, ...],
    secret_env: tuple[str, ...],
    secret_unset: tuple[str, ...],
    labels_add: tuple[str, ...],
    labels_unset: tuple[str, ...],
    cwd: str | None,
    no_check: bool,
    argv: tuple[str, ...],
    data_dir: str | None,
    as_json: bool,
) -> None:
    """Change task NAME in place: same id, same history; a new command goes after `--`.

    A --secret-env NAME reads its value from stdin (never argv); NAME=@VAR refers to a
    global variable. The change is recorded as a task event naming the fields and secret
    variables changed (never variable values). A run already started keeps the old
    definition; the next run gets the new one. A new schedule counts from now: nothing
    missed before the edit fires.

    \b
    Examples (a new schedule and command; a rename and relabel):
      ql3 local task edit backup --schedule '30 2 * * *' --env MODE=full \\
          -- backup.sh
      ql3 local task edit 签到 --name 京东签到 --label 京东 --unset-label 旧
    """
    changes: dict[str, object] = {}
    for key, value in (("name", new_name), ("labels_add", list(labels_add) or None),
                       ("labels_unset", list(labels_unset) or None),
                       ("schedule", schedule), ("timezone", timezone),
                       ("max_attempts", max_attempts), ("concurrency", concurrency)):
        if value is not None:
            changes[key] = value
    if timeout is not None:
        changes["timeout_s"] = _optional_number(timeout, "--timeout", float)
    if cwd is not None:
        changes["cwd"] = None if cwd.lower() == "none" else cwd
    if env_pairs:
        changes["env_set"] = _parse_env(env_pairs)
    if env_unset:
        changes["env_unset"] = list(env_unset)
    if secret_env:
        changes["secret_env"] = read_secret_env(secret_env)
    if secret_unset:
        changes["secret_env_unset"] = list(secret_unset)
    if argv:
        changes["argv"] = list(argv)
        _check_script(argv, None if cwd is None or cwd.lower() == "none" else cwd, no_check)
    if not changes:
        raise click.UsageError("nothing to change: give at least one option or a command")
    with open_backend(datadir_of(data_dir), "task edit") as backend:
        view = backend.call("task_edit", name=name, changes=changes)
    if as_json:
        print_json(view)
        return
    if not view["changed"]:
        click.echo(f"task {name} unchanged")
        return
    if "name" in view["changed"]:
        click.echo(f"renamed task {name} to {view['name']}")
        name = view["name"]
    click.echo(f"edited task {name}: {', '.join(view['changed'])}")
    if view["active_runs"]:
        click.echo(f"a run of {name} is active: it keeps the old definition; "
                   "the change applies to the next run")


@task.command("next")
@click.argument("name")
@click.option("-n", "count", type=click.IntRange(1, 100), default=5, show_default=True,
              help="How many upcoming slots.")
@data_dir_option
@json_option
def task_next(name: str, count: int, data_dir: str | None, as_json: bool) -> None:
    """List the next slots of task NAME, in the task's time zone and in yours."""
    with open_backend(datadir_of(data_dir), "task next") as backend:
        view = backend.call("task_next", name=name, count=count)
    if as_json:
        print_json(view)
        return
    for line in output.describe_next_slots(view):
        click.echo(line)


@task.command("list")
@click.option("--label", "label_filters", multiple=True, metavar="K=V",
              help="Only tasks with this label (repeatable: all must match).")
@click.option("--search", default=None, metavar="TEXT",
              help="Only tasks whose name or command holds TEXT (case-insensitive).")
@display_options
@data_dir_option
@json_option
def task_list(label_filters: tuple[str, ...], search: str | None, data_dir: str | None,
              as_json: bool) -> None:
    """List tasks, optionally only those with given labels or matching a text."""
    with open_backend(datadir_of(data_dir), "task list") as backend:
        tasks = backend.call("task_list")
    matching = sorted((t for t in tasks if task_matches(t, label_filters, search)),
                      key=lambda t: natural_key(t["name"]))  # task2 before task10
    if as_json:
        print_json(matching)
    elif not tasks:
        click.echo("no tasks yet: add one with `ql3 local task add NAME --schedule CRON "
                   "-- COMMAND`")
    elif not matching:
        plural = "" if len(tasks) == 1 else "s"
        click.echo(f"no task matches the filters ({len(tasks)} task{plural} in all)")
    else:
        output.print_tasks(matching)


def task_matches(task: dict[str, Any], labels: tuple[str, ...], search: str | None) -> bool:
    """Whether a task view passes ``task list``'s filters: every ``labels`` entry is one of
    the task's labels (``k=v`` as written; NFC), and ``search`` (when given) is in its name
    or its command, compared case-folded."""
    have = {unicodedata.normalize("NFC", str(label)) for label in task.get("labels", [])}
    if any(unicodedata.normalize("NFC", want) not in have for want in labels):
        return False
    if search:
        needle = unicodedata.normalize("NFC", search).casefold()
        haystack = f"{task['name']}\n{output.command(task['argv'])}".casefold()
        return needle in haystack
    return True


@task.command("show")
@click.argument("name")
@display_options
@data_dir_option
@json_option
def task_show(name: str, data_dir: str | None, as_json: bool) -> None:
    """Show one task, its recent runs and events."""
    with open_backend(datadir_of(data_dir), "task show") as backend:
        view = backend.call("task_show", name=name)
    if as_json:
        print_json(view)
        return
    for key in ("name", "id", "schedule", "timezone", "enabled", "concurrency", "timeout_s",
                "max_attempts", "cwd", "created_at"):
        click.echo(output.field(key, view[key]))
    click.echo(output.field("command", output.command(view["argv"])))
    click.echo(output.field("labels", output.labels_text(view)))
    for key, value in sorted(view["env"].items()):
        click.echo(output.field("env", f"{key}={value}"))
    for key, value in view.get("secret_env", {}).items():  # masked or @VAR, never a value
        click.echo(output.field("secret_env", f"{key}={value}"))
    if view.get("next_fire_pending"):
        click.echo(f"{'next_fire':>13}: pending (computed by the running serve)")
    else:
        click.echo(output.field("next_fire", view.get("next_fire")))
    click.echo(output.field("last_run", output.describe_last_run(view.get("last_run"))))
    if view["recent_runs"]:
        click.echo("recent runs:")
        output.print_runs(view["recent_runs"], indent="  ")  # as `runs --task` shows them
    if view["events"]:
        click.echo("recent events:")
    for event in view["events"]:
        click.echo("  " + output.describe_task_event(event))


def _toggle(name: str, enabled: bool, data_dir: str | None, as_json: bool) -> None:
    with open_backend(datadir_of(data_dir), "task enable") as backend:
        view = backend.call("task_enable", name=name, enabled=enabled)
    if as_json:
        print_json(view)
    else:
        click.echo(f"task {name} {'enabled' if enabled else 'disabled'}")


@task.command("enable")
@click.argument("name")
@data_dir_option
@json_option
def task_enable(name: str, data_dir: str | None, as_json: bool) -> None:
    """Enable a task (missed slots while disabled do not fire)."""
    _toggle(name, True, data_dir, as_json)


@task.command("disable")
@click.argument("name")
@data_dir_option
@json_option
def task_disable(name: str, data_dir: str | None, as_json: bool) -> None:
    """Disable a task (running attempts continue)."""
    _toggle(name, False, data_dir, as_json)


@task.command("rm")
@click.argument("name")
@data_dir_option
@json_option
def task_rm(name: str, data_dir: str | None, as_json: bool) -> None:
    """Remove a task; its run history stays."""
    with open_backend(datadir_of(data_dir), "task rm") as backend:
        view = backend.call("task_rm", name=name)
    if as_json:
        print_json(view)
    else:
        click.echo(f"removed task {view['name']}")
