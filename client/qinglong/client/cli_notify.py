"""``ql3 cluster notify ...``: the cluster's push channels (docs/protocols.md §4.5).

A channel is an Apprise URL (Bark, Telegram, WeCom, DingTalk, Feishu, PushPlus, ServerChan,
Gotify, ntfy, email, webhooks), read from stdin (never argv) and shown by scheme and host.
Admin scope.
"""

from __future__ import annotations

from typing import Any

import click

from qinglong.client.cli_common import connection, json_option, print_json
from qinglong.client.cli_tasks import read_secret
from qinglong.client.http import ControlClient


@click.group("notify")
def notify_group() -> None:
    """Push channels: control sends a notification when a run ends (admin).

    \b
    printf %s "bark://api.day.app/$KEY" | ql3 cluster notify add
    printf %s "tgram://$BOT/$CHAT" | ql3 cluster notify add --on failed,succeeded
    ql3 cluster notify list && ql3 cluster notify test
    """


@notify_group.command("add")
@click.option("--on", "statuses", default="failed,timed_out,lost", metavar="S,S",
              help="Statuses that notify (failed, timed_out, lost, succeeded, cancelled).")
@json_option
@connection
def notify_add(statuses: str, as_json: bool, client: ControlClient) -> None:
    """Add a channel: its Apprise URL is read from stdin, never argv."""
    url = read_secret("channel URL")
    on = [s.strip() for s in statuses.split(",") if s.strip()]
    _, view = client.send("POST", "/v1/notify/channels", {"url": url, "notify_on": on})
    if as_json:
        print_json(view)
    else:
        click.echo(f"added {view['target']}  on {','.join(view['notify_on'])}")
        click.echo(f"  id {view['id']}")


@notify_group.command("list")
@json_option
@connection
def notify_list(as_json: bool, client: ControlClient) -> None:
    """List channels by id, scheme and host (never a URL)."""
    views: list[dict[str, Any]] = client.get("/v1/notify/channels")
    if as_json:
        print_json(views)
        return
    if not views:
        click.echo("no push channels")
    for view in views:
        click.echo(f"{view['target']}  on {','.join(view['notify_on'])}")
        click.echo(f"  id {view['id']}")


@notify_group.command("rm")
@click.argument("channel_id")
@connection
def notify_rm(channel_id: str, client: ControlClient) -> None:
    """Remove channel CHANNEL_ID (see notify list)."""
    client.send("DELETE", f"/v1/notify/channels/{channel_id}")
    click.echo(f"removed channel {channel_id}")


@notify_group.command("test")
@json_option
@connection
def notify_test(as_json: bool, client: ControlClient) -> None:
    """Send a sample notification through every channel now; exit 1 if any failed."""
    _, views = client.send("POST", "/v1/notify/test", {})
    if as_json:
        print_json(views)
    else:
        if not views:
            click.echo("no push channels")
        for view in views:
            state = "ok" if view["ok"] else f"FAILED ({view.get('error')})"
            click.echo(f"{view['target']}: {state}")
    if not views or not all(v["ok"] for v in views):
        raise SystemExit(1)
