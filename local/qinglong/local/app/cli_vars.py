"""``ql3 local vars ...`` and the reading of secret values (issue 12 item 7).

A secret value never comes from argv (it would show in ``ps``, shell history and audit
logs): it is read from stdin (a hidden prompt on a terminal) or from a file.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from qinglong.local.app import display
from qinglong.local.app.backend import open_backend
from qinglong.local.app.cli_common import data_dir_option, datadir_of, json_option, print_json
from qinglong.shared import secret_text
from qinglong.shared.errors import ValidationError


def read_secret(what: str, from_file: str | None = None) -> str:
    """The value of ``what``: from ``from_file``, else a hidden prompt on a terminal, else
    all of stdin (``shared/secret_text.py``'s ``read_secret``). One trailing newline is
    dropped (``echo x | ...`` gives ``x``). Raises ValidationError (unreadable file, too
    large, not UTF-8, NUL) without echoing any of it."""
    return secret_text.read_secret(what, _hidden_prompt, from_file)


def _hidden_prompt(label: str) -> str:
    return str(click.prompt(label, hide_input=True, err=True))


secret_env_option = click.option(
    "--secret-env", "secret_env", multiple=True, metavar="NAME|NAME=@VAR",
    help="Secret environment variable: NAME reads its value from stdin (never argv); "
         "NAME=@VAR refers to global variable VAR (resolved at each start). Shown masked.")


def read_secret_env(items: tuple[str, ...]) -> dict[str, dict[str, str]]:
    """``--secret-env`` options as the socket's shape ``{name: {"value"} | {"variable"}}``.
    At most one NAME may read stdin (unless stdin is a terminal: one prompt each). Raises
    ValidationError("secret_env", ...); a ``NAME=value`` is refused without echoing it."""
    out: dict[str, dict[str, str]] = {}
    from_stdin = [i for i in items if "=" not in i]
    if len(from_stdin) > 1 and not sys.stdin.isatty():
        raise ValidationError("secret_env", "only one --secret-env NAME can read stdin; "
                                            "use NAME=@VAR with `ql3 local vars set VAR`")
    for item in items:
        name, sep, rest = item.partition("=")
        if name in out:
            raise ValidationError("secret_env", f"{name} is given twice")
        if not sep:
            out[name] = {"value": read_secret(f"secret {name}")}
        elif rest.startswith("@") and len(rest) > 1:
            out[name] = {"variable": rest[1:]}
        else:
            raise ValidationError("secret_env", f"{name}: a secret value is never taken from "
                                                "the command line; give NAME (value on stdin) "
                                                "or NAME=@VAR")
    return out


@click.group("vars")
def vars_group() -> None:
    """Global variables every task receives (values are never shown)."""


@vars_group.command("list")
@display.utc_option
@data_dir_option
@json_option
def vars_list(data_dir: str | None, as_json: bool) -> None:
    """List global variables: each value's index, on/off and remark; values never shown.

    A task receives NAME = the enabled values joined with & in their order.
    """
    with open_backend(datadir_of(data_dir), "vars list") as backend:
        views: list[dict[str, Any]] = backend.call("vars_list")
    if as_json:
        print_json(views)
        return
    if not views:
        click.echo("no global variables")
    for view in views:
        _echo_variable(view)


def _echo_variable(view: dict[str, Any]) -> None:
    kind = "secret" if view["secret"] else "plain"
    on = f"{view['enabled']} of {len(view['values'])} on"
    click.echo(f"{view['name']}={view['value']}  ({kind}, {on}, from {view['source']})")
    for item in view["values"]:
        remark = f"  {item['remark']}" if item["remark"] else ""
        shown = f"  = {item['value']}" if "value" in item else ""
        line = f"  #{item['index']} {'on ' if item['enabled'] else 'off'}{remark}{shown}"
        click.echo(line.rstrip())


@vars_group.command("show")
@click.argument("name")
@click.option("--reveal", is_flag=True,
              help="Print the values (a variable set with --plain only; secrets never).")
@data_dir_option
@json_option
def vars_show(name: str, reveal: bool, data_dir: str | None, as_json: bool) -> None:
    """Show global variable NAME: its values' index, on/off and remark."""
    with open_backend(datadir_of(data_dir), "vars show") as backend:
        view: dict[str, Any] = backend.call("vars_show", name=name, reveal=reveal)
    if as_json:
        print_json(view)
    else:
        _echo_variable(view)


def _toggle(name: str, index: int | None, enabled: bool, data_dir: str | None,
            as_json: bool) -> None:
    with open_backend(datadir_of(data_dir), "vars enable") as backend:
        view = backend.call("vars_enable", name=name, index=index, enabled=enabled)
    if as_json:
        print_json(view)
        return
    which = "every value" if index is None else f"value #{index}"
    state = "enabled" if enabled else "disabled (kept)"
    click.echo(f"{name}: {which} {state}" + ("" if view["changed"] else ", unchanged"))


index_option = click.option("--index", "index", type=click.IntRange(min=1), default=None,
                            metavar="N", help="The value at position N (see vars list).")


@vars_group.command("enable")
@click.argument("name")
@index_option
@data_dir_option
@json_option
def vars_enable(name: str, index: int | None, data_dir: str | None, as_json: bool) -> None:
    """Enable value N of NAME (every value without --index)."""
    _toggle(name, index, True, data_dir, as_json)


@vars_group.command("disable")
@click.argument("name")
@index_option
@data_dir_option
@json_option
def vars_disable(name: str, index: int | None, data_dir: str | None, as_json: bool) -> None:
    """Disable value N of NAME (every value without --index); the value is kept."""
    _toggle(name, index, False, data_dir, as_json)


@vars_group.command("set")
@click.argument("name")
# a value typed after NAME is taken only to be refused: click would echo it back in its
# "unexpected extra argument" error, and a secret must never be printed
@click.argument("argv_value", nargs=-1, metavar="")
@click.option("--from-file", default=None, metavar="FILE",
              help="Read the value from FILE instead of stdin.")
@click.option("--add", is_flag=True, help="Add the value after the others (multi-account).")
@index_option
@click.option("--remark", default=None, metavar="TEXT", help="A note on this value.")
@click.option("--plain/--secret", "plain", default=None,
              help="--plain: `vars show --reveal` may print the values (default --secret).")
@data_dir_option
@json_option
def vars_set(name: str, argv_value: tuple[str, ...], from_file: str | None, add: bool,
             index: int | None, remark: str | None, plain: bool | None,
             data_dir: str | None, as_json: bool) -> None:
    """Set global variable NAME; its value is read from stdin (or --from-file), never argv.

    Without --add or --index, NAME becomes this one value: its other values and
    their remarks are removed. NAME=value, as a task receives it (enabled values
    joined with &), may be 128 KiB (131,072 bytes with the name, '=' and a NUL: the
    kernel's limit on one environment entry).

    Example: printf %s "$TOKEN" | ql3 local vars set PUSH_TOKEN
    """
    if "=" in name:  # `vars set X=1`: the value is not taken from here, and never shown
        bare = name.partition("=")[0]
        raise ValidationError("variable", f"give the name alone: the value is read from stdin "
                              f"(or --from-file), never the command line, e.g. "
                              f"printf %s \"$VALUE\" | ql3 local vars set {bare}")
    if argv_value:
        raise ValidationError(f"variable {name}", "a value is never taken from the command "
                              "line (shell history, ps): pipe it on stdin or use --from-file")
    value = read_secret(f"variable {name}", from_file)
    with open_backend(datadir_of(data_dir), "vars set") as backend:
        view = backend.call("vars_set", name=name, value=value, remark=remark, index=index,
                            add=add, secret=None if plain is None else not plain)
    if as_json:
        print_json(view)
    else:
        which = f" value #{view['index']}" if add or index is not None else ""
        click.echo(f"{'set' if view['changed'] else 'unchanged'} variable {name}{which}")


@vars_group.command("rm")
@click.argument("name")
@index_option
@data_dir_option
@json_option
def vars_rm(name: str, index: int | None, data_dir: str | None, as_json: bool) -> None:
    """Remove global variable NAME, or only its value N (refused while a task's
    --secret-env refers to the variable it would remove)."""
    with open_backend(datadir_of(data_dir), "vars rm") as backend:
        view = backend.call("vars_rm", name=name, index=index)
    if as_json:
        print_json(view)
    else:
        click.echo(f"removed variable {name}" if index is None
                   else f"removed value #{index} of {name}")
