"""``ql3 cluster vars ...``: global variables through control (docs/protocols.md §4.5).

As Qinglong keeps them (环境变量): a name holds values in order, each with a remark and an
on/off flag; a task receives the enabled ones joined with ``&``. A value is read from stdin
(a hidden prompt on a terminal), never from argv; no command prints one.
"""

from __future__ import annotations

from typing import Any

import click

from qinglong.client.cli_common import connection, json_option, print_json, segment
from qinglong.client.cli_tasks import read_secret
from qinglong.client.http import ControlClient
from qinglong.shared.errors import ValidationError


@click.group("vars")
def vars_group() -> None:
    """Global variables every attempt receives (values never shown).

    \b
    printf %s "$CK1" | ql3 cluster vars set JD_COOKIE --remark 账号一
    printf %s "$CK2" | ql3 cluster vars set JD_COOKIE --add --remark 账号二
    ql3 cluster vars disable JD_COOKIE --index 2     # kept, not sent
    ql3 cluster vars list

    Writes need an operator token, list a viewer's. A task's own --env wins.
    """


index_option = click.option("--index", type=click.IntRange(min=1), default=None,
                            metavar="N", help="The value at position N (see vars list).")


@vars_group.command("list")
@json_option
@connection
def vars_list(as_json: bool, client: ControlClient) -> None:
    """List variables: scope, and each value's index, on/off and remark."""
    views: list[dict[str, Any]] = client.get("/v1/vars")
    if as_json:
        print_json(views)
        return
    if not views:
        click.echo("no global variables")
    for view in views:
        on = sum(1 for v in view["values"] if v["enabled"])
        scope = "all pools" if view["pools"] is None else "pools " + ",".join(view["pools"])
        click.echo(f"{view['name']}=********  ({on} of {len(view['values'])} on, {scope})")
        for item in view["values"]:
            remark = f"  {item['remark']}" if item["remark"] else ""
            click.echo(f"  #{item['index']} {'on ' if item['enabled'] else 'off'}{remark}"
                       .rstrip())


@vars_group.command("set")
@click.argument("name")
# a value typed after NAME is taken only to be refused (click would echo it in its error)
@click.argument("argv_value", nargs=-1, metavar="")
@click.option("--add", is_flag=True, help="Add the value after the others (multi-account).")
@index_option
@click.option("--remark", default=None, metavar="TEXT", help="A note on this value.")
@click.option("--pool", "pools", multiple=True, metavar="POOL",
              help="Only attempts claimed by POOL get it (repeatable; default all pools).")
@click.option("--all-pools", is_flag=True, help="Every pool gets it again.")
@json_option
@connection
def vars_set(name: str, argv_value: tuple[str, ...], add: bool, index: int | None,
             remark: str | None, pools: tuple[str, ...], all_pools: bool, as_json: bool,
             client: ControlClient) -> None:
    """Set a value of NAME, read from stdin (never argv).

    Without --add or --index, NAME becomes this one value. A value may be 128 KiB; a
    pool's variables together 1 MiB.
    """
    if argv_value:
        raise ValidationError(f"variable {name}", "a value is never taken from the command "
                              "line (shell history, ps): pipe it on stdin")
    if pools and all_pools:
        raise ValidationError("--pool", "give --pool or --all-pools, not both")
    body: dict[str, Any] = {"value": read_secret(f"variable {name}"), "add": add,
                            "index": index, "remark": remark}
    if pools or all_pools:
        body["pools"] = list(pools) or None
    _, view = client.send("POST", f"/v1/vars/{segment(name)}", body)
    if as_json:
        print_json(view)
    else:
        click.echo(f"set variable {name} value #{view['index']}")


def _toggle(client: ControlClient, name: str, index: int | None, enabled: bool,
            as_json: bool) -> None:
    verb = "enable" if enabled else "disable"
    _, view = client.send("POST", f"/v1/vars/{segment(name)}/{verb}", {"index": index})
    if as_json:
        print_json(view)
        return
    which = "every value" if index is None else f"value #{index}"
    click.echo(f"{name}: {which} {'enabled' if enabled else 'disabled (kept)'}")


@vars_group.command("enable")
@click.argument("name")
@index_option
@json_option
@connection
def vars_enable(name: str, index: int | None, as_json: bool, client: ControlClient) -> None:
    """Enable value N of NAME (every value without --index)."""
    _toggle(client, name, index, True, as_json)


@vars_group.command("disable")
@click.argument("name")
@index_option
@json_option
@connection
def vars_disable(name: str, index: int | None, as_json: bool, client: ControlClient) -> None:
    """Disable value N of NAME (every value without --index); the value is kept."""
    _toggle(client, name, index, False, as_json)


@vars_group.command("rm")
@click.argument("name")
@index_option
@connection
def vars_rm(name: str, index: int | None, client: ControlClient) -> None:
    """Remove NAME, or only its value N."""
    client.request("DELETE", f"/v1/vars/{segment(name)}", params={"index": index})
    click.echo(f"removed variable {name}" if index is None
               else f"removed value #{index} of {name}")
