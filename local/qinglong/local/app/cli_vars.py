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
from qinglong.shared.errors import ValidationError
from qinglong.shared.secret_text import SECRET_MAX_BYTES, decode_secret


def read_secret(what: str, from_file: str | None = None) -> str:
    """The value of ``what``: from ``from_file``, else a hidden prompt on a terminal, else
    all of stdin. One trailing newline is dropped (``echo x | ...`` gives ``x``). Raises
    ValidationError (too large, not UTF-8, NUL) without echoing any of it."""
    if from_file is not None:
        try:
            with open(from_file, "rb") as fh:
                data = fh.read(SECRET_MAX_BYTES + 1)
        except OSError as exc:
            raise ValidationError(what, f"cannot read {from_file}: {exc.strerror}") from None
    elif sys.stdin.isatty():
        data = click.prompt(f"value of {what}", hide_input=True, err=True).encode()
    else:
        data = sys.stdin.buffer.read(SECRET_MAX_BYTES + 1)
    return decode_secret(data, what)


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
    """List global variables by name; values are never shown."""
    with open_backend(datadir_of(data_dir), "vars list") as backend:
        views: list[dict[str, Any]] = backend.call("vars_list")
    if as_json:
        print_json(views)
        return
    if not views:
        click.echo("no global variables")
    for view in views:
        click.echo(f"{view['name']}={view['value']}  (source {view['source']}, "
                   f"updated {display.when(view['updated_at'])})")


@vars_group.command("set")
@click.argument("name")
# a value typed after NAME is taken only to be refused: click would echo it back in its
# "unexpected extra argument" error, and a secret must never be printed
@click.argument("argv_value", nargs=-1, metavar="")
@click.option("--from-file", default=None, metavar="FILE",
              help="Read the value from FILE instead of stdin.")
@data_dir_option
@json_option
def vars_set(name: str, argv_value: tuple[str, ...], from_file: str | None,
             data_dir: str | None, as_json: bool) -> None:
    """Set global variable NAME; its value is read from stdin (or --from-file), never argv.

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
        view = backend.call("vars_set", name=name, value=value)
    if as_json:
        print_json(view)
    else:
        click.echo(f"{'set' if view['changed'] else 'unchanged'} variable {name}")


@vars_group.command("rm")
@click.argument("name")
@data_dir_option
@json_option
def vars_rm(name: str, data_dir: str | None, as_json: bool) -> None:
    """Remove global variable NAME (refused while a task's --secret-env refers to it)."""
    with open_backend(datadir_of(data_dir), "vars rm") as backend:
        view = backend.call("vars_rm", name=name)
    if as_json:
        print_json(view)
    else:
        click.echo(f"removed variable {name}")
