"""``ql3 local web``: the web panel, from the ``qinglong-panel`` distribution (docs/panel.md).

The panel is imported only here and only when the command runs, by module name, so the
edge install and ``ql3 local serve`` never load it (integration/test_import_closure.py).
"""

from __future__ import annotations

import importlib
import sys

import click

from qinglong.local.app.cli_common import data_dir_option, datadir_of, fail

PANEL_MODULES = ("qinglong.panel", "starlette", "jinja2", "uvicorn", "multipart",
                 "python_multipart", "anyio")
INSTALL_HINT = "the web panel is not installed: pip install 'qinglong[web]'"


@click.command("web")
@data_dir_option
@click.option("--listen", default="127.0.0.1:5700", show_default=True, metavar="HOST:PORT",
              help="Where the panel listens (port 0: any free port).")
def web(data_dir: str | None, listen: str) -> None:
    """Serve the web panel, a client of `ql3 local serve` on the same data directory.

    Prints a one-time sign-in link. Never opens the database: without a running
    `serve`, every page says to start it. Needs `pip install 'qinglong[web]'` (exit 2
    without it).
    """
    try:
        panel = importlib.import_module("qinglong.panel.local_web")
    except ModuleNotFoundError as exc:
        name = exc.name or ""
        if any(name == m or name.startswith(m + ".") for m in PANEL_MODULES):
            click.echo(f"ql3: error: {INSTALL_HINT}", err=True)
            sys.exit(2)
        raise
    datadir = datadir_of(data_dir)
    try:
        code = panel.serve(datadir.socket_path, listen)
    except ValueError as exc:
        click.echo(f"ql3: error: {exc}", err=True)
        sys.exit(2)
    except OSError as exc:
        fail(f"cannot listen on {listen}: {exc.strerror or exc}")
    sys.exit(int(code))
