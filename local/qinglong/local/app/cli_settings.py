"""``ql3 local settings ...`` and ``ql3 local notify test`` (issue 12 items 8–9)."""

from __future__ import annotations

from typing import Any

import click

from qinglong.local.app import output
from qinglong.local.app import settings as keys
from qinglong.local.app.backend import open_backend
from qinglong.local.app.cli_common import (
    data_dir_option,
    datadir_of,
    fail,
    json_option,
    print_json,
)
from qinglong.local.app.cli_vars import read_secret
from qinglong.local.app.display import display_options
from qinglong.shared.display import field_lines
from qinglong.shared.errors import ValidationError


@click.group("settings")
def settings_group() -> None:
    """Data-directory settings: task PATH and run notifications.

    \b
    task_path         PATH of every task (default: systemd's list); a task's
                      --env PATH wins
    notify_command    command run when a run ends in a notify_on status, as one
                      shell-quoted string; it gets the run's facts as QL3_*
                      variables
    notify_webhook    http(s) URL that gets the facts as a JSON POST (give "-"
                      to read it from stdin; shown by host only)
    notify_urls       push channels: Apprise URLs (bark://, tgram://,
                      wecombot://, dingtalk://, feishu://, pushplus://,
                      schan://, gotify://, ntfy://, mailto://, json://...),
                      read from stdin ("-") only; shown by scheme and host;
                      needs pip install 'qinglong[notify]'
    notify_on         statuses that notify (default failed,timed_out,lost; add
                      succeeded)
    notify_timeout_s  seconds each notifier may take, 1-25 (default 10)
    """


def _print_setting(view: dict[str, Any]) -> None:
    shown = view["value"] if view["value"] is not None else (
        f"(default) {view['default']}" if view["default"] is not None else "(not set)")
    # whole (values are paths and commands): a long one on its own line under its key
    for line in field_lines(f"{view['key']:>16}: ", shown):
        click.echo(line)


@settings_group.command("show")
@display_options
@data_dir_option
@json_option
def settings_show(data_dir: str | None, as_json: bool) -> None:
    """Show every setting (a webhook by host only)."""
    with open_backend(datadir_of(data_dir), "settings show") as backend:
        views: list[dict[str, Any]] = backend.call("settings_show")
    if as_json:
        print_json(views)
        return
    for view in views:
        _print_setting(view)


@settings_group.command("set", context_settings={"ignore_unknown_options": True})
@click.argument("key", type=click.Choice(keys.KEYS), metavar="KEY")
@click.argument("value")
@data_dir_option
@json_option
def settings_set(key: str, value: str, data_dir: str | None, as_json: bool) -> None:
    """Set KEY to VALUE ("-": read VALUE from stdin, for a webhook URL holding a token).

    Example: ql3 local settings set notify_command '/usr/local/bin/push.sh --to ops'
    """
    if key == keys.NOTIFY_URLS and value != "-":
        raise ValidationError(key, "channel URLs hold tokens and are never taken from the "
                                   "command line: give - and pipe them on stdin")
    if value == "-":
        value = read_secret(key)
    with open_backend(datadir_of(data_dir), "settings set") as backend:
        view = backend.call("settings_set", key=key, value=value)
    if as_json:
        print_json(view)
    else:
        _print_setting(view)


@settings_group.command("unset")
@click.argument("key", type=click.Choice(keys.KEYS), metavar="KEY")
@data_dir_option
@json_option
def settings_unset(key: str, data_dir: str | None, as_json: bool) -> None:
    """Return KEY to its default (a notify channel: off)."""
    with open_backend(datadir_of(data_dir), "settings unset") as backend:
        view = backend.call("settings_set", key=key, value=None)
    if as_json:
        print_json(view)
    else:
        _print_setting(view)


@click.group("notify")
def notify_group() -> None:
    """Run notifications (configure them with `ql3 local settings set notify_...`)."""


@notify_group.command("test")
@data_dir_option
@json_option
def notify_test(data_dir: str | None, as_json: bool) -> None:
    """Send a sample notification (a made-up failed run of task ql3-notify-test) now.

    Exits 1 when no notifier is configured or any channel failed.
    """
    with open_backend(datadir_of(data_dir), "notify test") as backend:
        view: dict[str, Any] = backend.call("notify_test")
    if as_json:
        print_json(view)
    else:
        for done in view["deliveries"]:
            extra = output.event_detail(
                {k: v for k, v in done.items() if k not in ("channel", "ok")})
            click.echo(f"{done['channel']}: {'ok' if done['ok'] else 'FAILED'} ({extra})")
    if not view["configured"]:
        fail("no notifier configured (ql3 local settings set "
             "notify_command|notify_webhook|notify_urls)")
    if not all(d["ok"] for d in view["deliveries"]):
        raise SystemExit(1)
