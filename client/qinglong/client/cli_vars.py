"""``ql3 cluster vars ...``: global variables through control (docs/protocols.md §4.5).

As Qinglong keeps them (环境变量): a name holds values in order, each with a remark and an
on/off flag; a task receives the enabled ones joined with ``&``. A value is read from stdin
(a hidden prompt on a terminal), never from argv; only ``vars export`` prints values (a
plain variable's; a secret one's for an admin token that asks and confirms).
"""

from __future__ import annotations

import sys
from typing import Any

import click

from qinglong.client.cli_common import connection, json_option, print_json, segment
from qinglong.client.cli_tasks import read_secret
from qinglong.client.http import ControlClient
from qinglong.shared.errors import ValidationError
from qinglong.shared.variable_limits import check_variable_name


def _checked_name(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
    """NAME by the variable name rule of both profiles (``check_variable_name``), checked
    before stdin is read or control is asked, and said as a variable's (control's own 422
    would name the path's field only); raises ValidationError, never echoing NAME."""
    return check_variable_name(value)


name_argument = click.argument("name", callback=_checked_name)


@click.group("vars")
def vars_group() -> None:
    """Global variables every attempt receives (values shown by export only).

    \b
    printf %s "$CK1" | ql3 cluster vars set JD_COOKIE --remark 账号一
    printf %s "$CK2" | ql3 cluster vars set JD_COOKIE --add --remark 账号二
    printf %s "$UA" | ql3 cluster vars set JD_UA --plain    # exported, not masked
    ql3 cluster vars disable JD_COOKIE --index 2     # kept, not sent
    ql3 cluster vars pools JD_COOKIE --all-pools     # every pool again
    ql3 cluster vars list
    ql3 cluster vars export > vars.env               # plain values only

    Writes need an operator token, list and export a viewer's. A task's own --env wins.
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
@name_argument
# a value typed after NAME is taken only to be refused (click would echo it in its error)
@click.argument("argv_value", nargs=-1, metavar="")
@click.option("--add", is_flag=True, help="Add the value after the others (multi-account).")
@index_option
@click.option("--remark", default=None, metavar="TEXT", help="A note on this value.")
@click.option("--pool", "pools", multiple=True, metavar="POOL",
              help="Only attempts claimed by POOL get it (repeatable; default all pools).")
@click.option("--all-pools", is_flag=True, help="Every pool gets it again.")
@click.option("--plain/--secret", "plain", default=None,
              help="--plain: `vars export` may print the values (default --secret).")
@json_option
@connection
def vars_set(name: str, argv_value: tuple[str, ...], add: bool, index: int | None,
             remark: str | None, pools: tuple[str, ...], all_pools: bool,
             plain: bool | None, as_json: bool, client: ControlClient) -> None:
    """Set a value of NAME, read from stdin (never argv).

    Without --add or --index, NAME becomes this one value: its other values and
    their remarks are removed. NAME=value, as a task receives it (enabled values
    joined with &), may be 128 KiB (131,072 bytes with the name, '=' and a NUL: the
    kernel's limit on one environment entry); a pool's variables together 1 MiB.
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
    if plain is not None:  # neither: a new variable is secret, an existing one stays as it is
        body["secret"] = not plain
    _, view = client.send("POST", f"/v1/vars/{segment(name)}", body)
    if as_json:
        print_json(view)
    elif view.get("changed") == 0:  # --add of a value NAME already holds: not added again
        click.echo(f"unchanged: variable {name} already holds this value as #{view['index']}")
    else:
        click.echo(f"set variable {name} value #{view['index']}")


@vars_group.command("pools")
@name_argument
@click.option("--pool", "pools", multiple=True, metavar="POOL",
              help="Only attempts claimed by POOL get NAME (repeatable).")
@click.option("--all-pools", is_flag=True, help="Every pool gets NAME again.")
@json_option
@connection
def vars_pools(name: str, pools: tuple[str, ...], all_pools: bool, as_json: bool,
               client: ControlClient) -> None:
    """Set which pools get NAME, its values untouched (no value is read).

    \b
    ql3 cluster vars pools JD_UA --all-pools     # every pool again
    ql3 cluster vars pools JD_UA --pool jd --pool jd-backup
    """
    if bool(pools) == all_pools:
        raise ValidationError("--pool", "give --pool POOL (repeatable) or --all-pools")
    _, view = client.send("POST", f"/v1/vars/{segment(name)}/pools",
                          {"pools": list(pools) or None})
    if as_json:
        print_json(view)
    else:
        scope = "all pools" if view["pools"] is None else "pools " + ",".join(view["pools"])
        click.echo(f"variable {name}: {scope}")


@vars_group.command("export")
@click.option("--include-secrets", is_flag=True,
              help="Secret variables' values too (admin token; asks to confirm).")
@click.option("--yes", is_flag=True, help="Confirm --include-secrets without asking.")
@connection
def vars_export(include_secrets: bool, yes: bool, client: ControlClient) -> None:
    """Print the enabled values as NAME=value lines (import them on the panel's page).

    Plain variables only: secret values stay out unless --include-secrets, which needs an
    admin token and a confirmation (a prompt on a terminal, else --yes); control logs such
    an export with the token's name. Multi-line values are left out.

    \b
    ql3 cluster vars export > vars.env
    """
    if include_secrets and not yes:
        if not sys.stdin.isatty():
            raise ValidationError("--include-secrets", "secret values would be printed: "
                                  "confirm with --yes (no terminal to ask on)")
        click.confirm("Print the secret variables' values in plain text?", abort=True,
                      err=True)
    response = client.request("GET", "/v1/vars/export",
                              params={"include_secrets": "true" if include_secrets else None})
    click.echo(response.text, nl=False)


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
@name_argument
@index_option
@json_option
@connection
def vars_enable(name: str, index: int | None, as_json: bool, client: ControlClient) -> None:
    """Enable value N of NAME (every value without --index)."""
    _toggle(client, name, index, True, as_json)


@vars_group.command("disable")
@name_argument
@index_option
@json_option
@connection
def vars_disable(name: str, index: int | None, as_json: bool, client: ControlClient) -> None:
    """Disable value N of NAME (every value without --index); the value is kept."""
    _toggle(client, name, index, False, as_json)


@vars_group.command("rm")
@name_argument
@index_option
@connection
def vars_rm(name: str, index: int | None, client: ControlClient) -> None:
    """Remove NAME, or only its value N."""
    client.request("DELETE", f"/v1/vars/{segment(name)}", params={"index": index})
    click.echo(f"removed variable {name}" if index is None
               else f"removed value #{index} of {name}")
