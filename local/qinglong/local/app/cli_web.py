"""``ql3 local web``: the panel (docs/panel.md), imported by name only when it runs."""

from __future__ import annotations

import importlib
import os
import signal
import sys
import threading
import time

import click

from qinglong.local.app.cli_common import data_dir_option, datadir_of


@click.command("web")
@data_dir_option
@click.option("--listen", default="127.0.0.1:5700", show_default=True, metavar="HOST:PORT",
              help="Where the panel listens (port 0: any free port).")
@click.option("--set-password", "set_password", is_flag=True,
              help="Set the panel's password (scrypt, stored 0600 in the data directory) "
                   "and exit; read from the terminal, or one line on stdin.")
@click.option("--new-link", "new_link", is_flag=True,
              help="Print a new one-time sign-in link of the panel running on this data "
                   "directory (the older unused one stops working) and exit.")
@click.option("--trusted-proxy", "trusted_proxy", default=None, metavar="ADDR[,ADDR]",
              help="Reverse proxies (IP addresses or networks like 10.0.0.0/8) whose "
                   "X-Forwarded-For and X-Forwarded-Proto the panel believes; from any "
                   "other peer they are ignored (default: none).")
@click.option("--parent-pid", "parent_pid", type=int, default=None, hidden=True,
              help="Stop (as on SIGTERM) when this process is gone: `ql3 local serve --web`.")
def web(data_dir: str | None, listen: str, set_password: bool, new_link: bool,
        trusted_proxy: str | None, parent_pid: int | None) -> None:
    """Serve the web panel, a client of `ql3 local serve` (needs qinglong[web])."""
    try:
        panel = importlib.import_module("qinglong.panel.local_web")
    except ModuleNotFoundError as exc:
        if not (exc.name or "").startswith(("qinglong.panel", "starlette", "jinja2",
                                            "uvicorn", "multipart", "python_multipart")):
            raise
        click.echo("ql3: error: the web panel is not installed: pip install 'qinglong[web]'",
                   err=True)
        sys.exit(2)
    if parent_pid is not None:
        _stop_when_orphaned(parent_pid)
    sys.exit(panel.main(datadir_of(data_dir).socket_path, listen, set_password,
                        trusted_proxy, new_link))


def _stop_when_orphaned(parent_pid: int, period_s: float = 1.0) -> None:
    """A daemon thread sending this process SIGTERM once its parent is no longer
    ``parent_pid`` (serve was killed without stopping its panel child)."""
    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(period_s)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="ql3-web-orphan-watch", daemon=True).start()
