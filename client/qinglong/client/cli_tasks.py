"""``ql3 cluster task ...``: add, edit, list, show, next, enable, disable, rm — the flags of
``ql3 local task`` where the cluster has the same field (docs/protocols.md §4.5), plus
``--bundle`` / ``--entry-point`` for a task running a script bundle (§4.7)."""

from __future__ import annotations

import sys
import time
from typing import Any

import click

from qinglong.client import output
from qinglong.client.cli_common import (
    connection,
    display_options,
    json_option,
    print_json,
    segment,
)
from qinglong.client.cli_scripts import resolve_digest
from qinglong.client.errors import ControlConflictError
from qinglong.client.http import ControlClient
from qinglong.shared import secret_text
from qinglong.shared.display import describe_last_run, iso_utc, natural_key
from qinglong.shared.errors import ValidationError

MASK = "********"


@click.group()
def task() -> None:
    """Manage the cluster's task definitions."""


def _pairs(items: tuple[str, ...], option: str) -> dict[str, str]:
    """``K=V`` options as a dict (BadParameter, exit 2, for one without ``=`` or without a
    key; an empty value is left to the API's rule, which names it)."""
    found: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter("use K=V, a key and a value (zone=a)", param_hint=option)
        found[key] = value
    return found


def read_secret(what: str) -> str:
    """A secret's value: a hidden prompt on a terminal, else all of stdin (never argv;
    ``shared/secret_text.py``'s ``read_secret``). ValidationError without echoing it: too
    large, not UTF-8, NUL."""
    return secret_text.read_secret(
        what, lambda label: str(click.prompt(label, hide_input=True, err=True)))


def read_secret_env(names: tuple[str, ...]) -> dict[str, str]:
    """``--secret-env NAME`` options: each value read from stdin (one name at most when
    stdin is not a terminal). ``NAME=@VAR`` (a local global variable) and ``NAME=value``
    are refused without echoing anything."""
    if len(names) > 1 and not sys.stdin.isatty():
        raise ValidationError("secret_env", "only one --secret-env NAME can read stdin; "
                                            "add the others with `task edit --secret-env`")
    values: dict[str, str] = {}
    for name in names:
        key, sep, rest = name.partition("=")
        if sep and rest.startswith("@"):
            raise ValidationError("secret_env", f"{key}: the cluster has no global variables; "
                                                "give NAME and pipe the value on stdin")
        if sep:
            raise ValidationError("secret_env", f"{key}: a secret value is never taken from "
                                                "the command line; give NAME (value on stdin)")
        if key in values:
            raise ValidationError("secret_env", f"{key} is given twice")
        values[key] = read_secret(f"secret {key}")
    return values


secret_env_option = click.option(
    "--secret-env", "secret_env", multiple=True, metavar="NAME",
    help="Secret environment variable: its value is read from stdin (never argv) and never "
         "answered by control (shown masked).")


bundle_help = ("Run script bundle DIGEST (`ql3 cluster script push`; 64 hex digits or a "
               "unique prefix of 8+) in its extracted directory; needs --entry-point.")
entry_point_help = ("The bundle's file to run, a path inside it (run.sh, bin/job.py): "
                    "run directly when it starts with #!, else by /bin/sh. A command after "
                    "`--` or --shell, if given, runs instead, in the bundle's directory.")


def _command(argv: tuple[str, ...], shell: str | None) -> dict[str, Any]:
    if argv and shell is not None:
        raise click.UsageError("give a command after `--` or --shell, not both")
    if argv:
        return {"argv": list(argv)}
    if shell is not None:
        return {"shell": shell}
    return {}


@task.command("add")
@click.argument("name")
@click.option("--schedule", required=True, metavar="CRON",
              help="5-field cron, 6 fields with seconds first, an @ alias such as @daily, "
                   "or @once (manual runs only; the cluster has no @boot).")
@click.option("--timezone", default=None, metavar="TZ",
              help="IANA time zone the schedule is read in [default: control's "
                   "--default-timezone when set, else this machine's zone (TZ or "
                   "/etc/localtime), else UTC].")
@click.option("--timeout", type=click.IntRange(1, 2**31 - 1), default=None, metavar="SECONDS",
              help="Stop an attempt after this many seconds (TERM, grace, KILL).")
@click.option("--max-attempts", type=click.IntRange(1, 100), default=1, show_default=True,
              help="Attempts per run; failed, timed-out or lost attempts retry with backoff.")
@click.option("--concurrency", type=click.Choice(["forbid", "allow", "replace"]),
              default="forbid", show_default=True,
              help="A due slot while a run is active: skip it, run both, or replace.")
@click.option("--env", "env_pairs", multiple=True, metavar="K=V",
              help="Environment variable (shown by task show).")
@secret_env_option
@click.option("--cwd", default=None, metavar="DIR", help="Working directory on the worker.")
@click.option("--label", "label_pairs", multiple=True, metavar="K=V",
              help="Only workers declaring this label run it (repeatable).")
@click.option("--shell", default=None, metavar="LINE",
              help="A command line for /bin/sh -c, instead of a command after `--`.")
@click.option("--bundle", default=None, metavar="DIGEST", help=bundle_help)
@click.option("--entry-point", "entry_point", default=None, metavar="PATH",
              help=entry_point_help)
@click.argument("argv", nargs=-1)
@json_option
@connection
def task_add(name: str, schedule: str, timezone: str | None, timeout: int | None,
             max_attempts: int,
             concurrency: str, env_pairs: tuple[str, ...], secret_env: tuple[str, ...],
             cwd: str | None, label_pairs: tuple[str, ...], shell: str | None,
             bundle: str | None, entry_point: str | None, argv: tuple[str, ...],
             as_json: bool, client: ControlClient) -> None:
    """Register task NAME running ARGV (write it after `--`) on a schedule, or the entry
    point of a script bundle (--bundle with --entry-point; no --cwd then).

    \b
    Examples:
    ql3 cluster task add backup --schedule '0 3 * * *' -- /usr/local/bin/backup.sh
    ql3 cluster task add job --schedule @once --bundle 5d9c0a1e \\
        --entry-point run.sh
    """
    command = _command(argv, shell)
    if (bundle is None) != (entry_point is None):
        raise ValidationError("--bundle", "give --bundle and --entry-point together")
    if not command and bundle is None:
        raise ValidationError("argv", "the command must not be empty: write it after `--`, "
                                      "give --shell, or run a bundle (--bundle, "
                                      "--entry-point)")
    env: dict[str, Any] = {k: {"value": v, "secret": False}
                           for k, v in _pairs(env_pairs, "--env").items()}
    for key, value in read_secret_env(secret_env).items():
        if key in env:
            raise ValidationError("secret_env", f"{key} is also given with --env")
        env[key] = {"value": value, "secret": True}
    body = {"name": name, **command, "schedule": schedule, "env": env,
            "cwd": cwd, "timeout_s": timeout, "max_attempts": max_attempts,
            "concurrency_policy": concurrency, "labels": _pairs(label_pairs, "--label")}
    if timezone is not None:
        body["timezone"] = timezone
    else:  # control's --default-timezone wins over the caller's zone
        from qinglong.shared.zones import machine_zone

        caller, note = machine_zone()
        if note is None:
            body["caller_timezone"] = caller
        else:
            click.echo(f"note: {note}", err=True)
    if bundle is not None:
        body.update(bundle_digest=resolve_digest(client, bundle, "--bundle"),
                    entry_point=entry_point)
    _, view = client.send("POST", "/v1/tasks", body, task=name)
    if as_json:
        print_json(view)
    else:
        click.echo(f"added task {view['name']} ({view['id']})")


def _optional(value: str | None, option: str) -> object:
    """``none`` → None (cleared), a whole number ≥ 1 → it, else a usage error; None when
    the option was not given (the caller leaves the field out)."""
    if value is None or value.lower() == "none":
        return None
    try:
        number = int(value)
    except ValueError:
        raise click.BadParameter("a whole number of seconds, or 'none'",
                                 param_hint=option) from None
    if number < 1:
        raise click.BadParameter("at least 1, or 'none'", param_hint=option)
    return number


def _edited_env(current: dict[str, Any], env_set: dict[str, str], env_unset: tuple[str, ...],
                secrets: dict[str, str], secret_unset: tuple[str, ...]) -> dict[str, Any]:
    """The whole env map a PATCH replaces: current entries kept by a null value (control
    keeps their value and secrecy), then the changes. A plain --env of a secret's name, and
    an unset of a name the task does not have (or of the other kind), are refused."""
    env: dict[str, Any] = {k: {"value": None, "secret": bool(e.get("secret"))}
                           for k, e in current.items()}
    for key in env_unset:
        if key not in current or current[key].get("secret"):
            raise ValidationError("env", f"{key} is not a plain variable of the task")
        env.pop(key)
    for key in secret_unset:
        if key not in current or not current[key].get("secret"):
            raise ValidationError("secret_env", f"{key} is not a secret variable of the task")
        env.pop(key)
    for key, value in env_set.items():
        if current.get(key, {}).get("secret"):
            raise ValidationError("env", f"{key} is a secret: set it with --secret-env {key}")
        env[key] = {"value": value, "secret": False}
    for key, value in secrets.items():
        env[key] = {"value": value, "secret": True}
    return env


def _unset_labels(labels: dict[str, str], unset: tuple[str, ...]) -> dict[str, str]:
    """``labels`` (key -> value) less each ``--unset-label`` item: a key removes that label;
    ``K=V`` removes key K only while its value is V, as ``ql3 local task edit --unset-label``
    takes a label as it is shown (README "task edit"). ValidationError names an item the task
    does not have, and for ``K=V`` the value K has instead."""
    for item in unset:
        key, eq, value = item.partition("=")
        if key not in labels:
            raise ValidationError("label", f"{item} is not a label of the task")
        if eq and labels[key] != value:
            raise ValidationError("label", f"{item} is not a label of the task: its {key} is "
                                  f"{labels[key]} (--unset-label {key} removes it)")
        del labels[key]
    return labels


@task.command("edit")
@click.argument("name")
@click.option("--name", "new_name", default=None, metavar="NEW",
              help="Rename the task (runs and history stay its own).")
@click.option("--schedule", default=None, metavar="CRON", help="New schedule.")
@click.option("--timezone", default=None, metavar="TZ", help="New IANA time zone.")
@click.option("--timeout", default=None, metavar="SECONDS|none",
              help="New timeout in seconds, or 'none' for no timeout.")
@click.option("--max-attempts", type=click.IntRange(1, 100), default=None,
              help="New attempts per run.")
@click.option("--concurrency", type=click.Choice(["forbid", "allow", "replace"]),
              default=None, help="New policy for a due slot while a run is active.")
@click.option("--env", "env_pairs", multiple=True, metavar="K=V",
              help="Set an environment variable (repeatable).")
@click.option("--unset-env", "env_unset", multiple=True, metavar="K",
              help="Remove an environment variable (repeatable).")
@secret_env_option
@click.option("--unset-secret-env", "secret_unset", multiple=True, metavar="NAME",
              help="Remove a secret environment variable (repeatable).")
@click.option("--cwd", default=None, metavar="DIR|none",
              help="New working directory, or 'none' for the worker's default.")
@click.option("--label", "label_pairs", multiple=True, metavar="K=V",
              help="Set a label (repeatable).")
@click.option("--unset-label", "label_unset", multiple=True, metavar="K|K=V",
              help="Remove a label by key; K=V only if it has that value (repeatable).")
@click.option("--shell", default=None, metavar="LINE", help="New /bin/sh -c command line.")
@click.option("--bundle", default=None, metavar="DIGEST|none",
              help="Run this script bundle instead (with --entry-point; clears --cwd), or "
                   "'none' to stop running one (the task then needs a command).")
@click.option("--entry-point", "entry_point", default=None, metavar="PATH",
              help="New file of the bundle to run.")
@click.argument("argv", nargs=-1)
@json_option
@connection
def task_edit(name: str, new_name: str | None, schedule: str | None, timezone: str | None,
              timeout: str | None,
              max_attempts: int | None, concurrency: str | None, env_pairs: tuple[str, ...],
              env_unset: tuple[str, ...], secret_env: tuple[str, ...],
              secret_unset: tuple[str, ...], cwd: str | None, label_pairs: tuple[str, ...],
              label_unset: tuple[str, ...], shell: str | None, bundle: str | None,
              entry_point: str | None, argv: tuple[str, ...], as_json: bool,
              client: ControlClient) -> None:
    """Change task NAME in place: same id, same history; a new command goes after `--`.

    Only what is given changes. The edit is recorded as a task event naming the fields
    (never a value). A run already started keeps the old definition. Environment and label
    changes are made on the task as read first: should someone change it in between, the
    edit is refused (run it again).

    \b
    Examples (a new schedule and env; a rename and relabel):
      ql3 cluster task edit backup --schedule '30 2 * * *' --env MODE=full
      ql3 cluster task edit 签到 --name 京东签到 --label platform=jd
    """
    patch: dict[str, Any] = {k: v for k, v in (
        ("name", new_name), ("schedule", schedule), ("timezone", timezone),
        ("max_attempts", max_attempts), ("concurrency_policy", concurrency))
        if v is not None}
    if timeout is not None:
        patch["timeout_s"] = _optional(timeout, "--timeout")
    if cwd is not None:
        patch["cwd"] = None if cwd.lower() == "none" else cwd
    patch.update(_command(argv, shell))
    if entry_point is not None:
        patch["entry_point"] = entry_point
    if bundle is not None and bundle.lower() == "none":
        if entry_point is not None:
            raise ValidationError("--entry-point", "a task without a bundle has none")
        patch["bundle_digest"] = None
    elif bundle is not None:
        patch["bundle_digest"] = resolve_digest(client, bundle, "--bundle")
    env_set = _pairs(env_pairs, "--env")
    labels_set = _pairs(label_pairs, "--label")
    if not (patch or env_set or env_unset or secret_env or secret_unset or labels_set
            or label_unset):
        raise click.UsageError("nothing to change: give at least one option or a command")
    secrets = read_secret_env(secret_env)
    before = client.get(f"/v1/tasks/{segment(name)}", task=name)
    if env_set or env_unset or secrets or secret_unset:
        patch["env"] = _edited_env(before["env"], env_set, env_unset, secrets, secret_unset)
    if labels_set or label_unset:
        labels = _unset_labels(dict(before["labels"]), label_unset)
        patch["labels"] = {**labels, **labels_set}
    if "env" in patch or "labels" in patch:  # merged into what was read: only onto that
        patch["version"] = before["version"]
    try:
        _, view = client.send("PATCH", f"/v1/tasks/{segment(name)}", patch, task=name)
    except ControlConflictError as exc:
        if exc.error_code == "task_exists" and new_name is not None:
            raise ControlConflictError(f"task {new_name!r} already exists",
                                       exc.error_code) from None
        raise
    if as_json:
        print_json(view)
    elif view["version"] == before["version"]:
        click.echo(f"task {name} unchanged")
    else:
        edited = next((e for e in view["history"] if e["kind"] == "edited"), None)
        changed = list((edited or {}).get("detail", {}).get("fields", []))
        if "name" in changed:  # as `ql3 local task edit --name`
            click.echo(f"renamed task {name} to {view['name']}")
            name = view["name"]
        click.echo(f"edited task {name}: {', '.join(changed)}")


@task.command("list")
@click.option("--label", "label_filters", multiple=True, metavar="K=V",
              help="Only tasks with this label (repeatable: all must match).")
@click.option("--search", default=None, metavar="TEXT",
              help="Only tasks whose name or command holds TEXT (case-insensitive).")
@display_options
@json_option
@connection
def task_list(label_filters: tuple[str, ...], search: str | None, as_json: bool,
              client: ControlClient) -> None:
    """List the live tasks by name: schedule, next fire time, last run (status and
    duration; --wide adds its finish time), command, labels."""
    for item in label_filters:
        if "=" not in item or item.startswith("="):
            raise click.BadParameter("use K=V", param_hint="--label")
    params: dict[str, Any] = {"label": list(label_filters)} if label_filters else {}
    if search:
        params["q"] = search
    items = sorted(client.items("/v1/tasks", params or None),
                   key=lambda t: natural_key(t["name"]))  # task2 before task10
    if as_json:
        print_json(items)
    elif not items and params:
        click.echo("no task matches the filters")
    elif not items:
        click.echo("no tasks yet: `ql3 cluster task add --help` says how to add one")
    else:
        output.print_tasks(items)


@task.command("show")
@click.argument("name")
@display_options
@json_option
@connection
def task_show(name: str, as_json: bool, client: ControlClient) -> None:
    """Show task NAME, its recent runs and its history (secret values never). Long values
    are cut to the terminal's width: --wide or --json show them whole."""
    view = client.get(f"/v1/tasks/{segment(name)}", task=name)
    recent = client.items("/v1/runs", {"task": name}, limit=5)
    if as_json:
        print_json({**view, "recent_runs": recent})
        return
    # the keys as `ql3 local task show` names them (``concurrency``, as the flag), aligned
    shown = {"concurrency_policy": "concurrency"}
    pairs: list[tuple[str, object]] = [
        (shown.get(key, key), view[key]) for key in (
            "name", "id", "schedule", "timezone", "enabled", "concurrency_policy",
            "timeout_s", "max_attempts", "cwd", "created_at", "updated_at")]
    if view.get("bundle_digest"):
        pairs += [("bundle_digest", view["bundle_digest"]),
                  ("entry_point", view["entry_point"])]
    pairs.append(("command", output.task_command(view)))
    for key, entry in sorted(view["env"].items()):
        shown_value = MASK if entry["secret"] else entry["value"]
        pairs.append(("secret_env" if entry["secret"] else "env", f"{key}={shown_value}"))
    pairs.append(("labels", output.labels(view["labels"])))
    pairs.append(("next_fire_at", view["next_fire_at"] if view["enabled"]
                  else output.Shown("disabled")))
    pairs.append(("last_run", describe_last_run(view.get("last_run"))))
    output.print_fields(pairs)
    if recent:
        click.echo("recent runs:")
        output.print_runs(recent, indent="  ")
    if view["history"]:
        click.echo("recent events:")
    for event in view["history"][:10]:
        click.echo("  " + output.describe_task_event(event))


@task.command("next")
@click.argument("name")
@click.option("-n", "count", type=click.IntRange(1, 100), default=5, show_default=True,
              help="How many upcoming slots.")
@json_option
@connection
def task_next(name: str, count: int, as_json: bool, client: ControlClient) -> None:
    """List the next slots of task NAME, in the task's time zone and in yours (computed
    here, with the scheduler's own cron rules)."""
    view = client.get(f"/v1/tasks/{segment(name)}", task=name)
    slots: list[int] = []
    if view["schedule"]:
        from qinglong.shared.cron import parse_schedule  # croniter: this command's only

        schedule = parse_schedule(view["schedule"], view["timezone"])
        slots = schedule.next_slots(int(time.time() * 1000), count)
    answer = {"task": view["name"], "schedule": view["schedule"],
              "timezone": view["timezone"], "enabled": view["enabled"],
              "slots": [iso_utc(s) for s in slots]}
    if as_json:
        print_json(answer)
        return
    for line in output.next_slots_lines(answer):
        click.echo(line)


def _toggle(name: str, enabled: bool, as_json: bool, client: ControlClient) -> None:
    verb = "enable" if enabled else "disable"
    _, view = client.send("POST", f"/v1/tasks/{segment(name)}/{verb}", task=name)
    if as_json:
        print_json(view)
    else:
        click.echo(f"task {name} {verb}d")


@task.command("enable")
@click.argument("name")
@json_option
@connection
def task_enable(name: str, as_json: bool, client: ControlClient) -> None:
    """Enable task NAME (slots missed while disabled do not fire; they are recorded)."""
    _toggle(name, True, as_json, client)


@task.command("disable")
@click.argument("name")
@json_option
@connection
def task_disable(name: str, as_json: bool, client: ControlClient) -> None:
    """Disable task NAME (running attempts continue)."""
    _toggle(name, False, as_json, client)


@task.command("rm")
@click.argument("name")
@json_option
@connection
def task_rm(name: str, as_json: bool, client: ControlClient) -> None:
    """Remove task NAME: its queued runs end cancelled, running ones finish; its history
    stays readable and the name is free again."""
    client.send("DELETE", f"/v1/tasks/{segment(name)}", task=name)
    if as_json:
        print_json({"removed": name})
    else:
        click.echo(f"removed task {name}")
