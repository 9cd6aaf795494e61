"""Options and helpers shared by the ``ql3 local`` commands."""

from __future__ import annotations

import errno
import json
import sys
import time
from typing import Any, NoReturn

import click

from qinglong.local.app import output
from qinglong.local.app.datadir import ENV_DATA_DIR, DataDir, default_data_dir

STATUS_POLL_S = 0.3


def os_error_message(exc: OSError) -> str:
    """One line saying what failed (issue 12 item 10): the path involved when the error has
    one (``cannot use '/srv/x': Permission denied``), ``output failed`` only for a write to
    stdout/stderr (a closed pipe, a full disk), else the system's message."""
    reason = exc.strerror or str(exc) or type(exc).__name__
    if exc.filename is not None:
        where = f"'{exc.filename}'"
        if exc.filename2 is not None:
            where += f" -> '{exc.filename2}'"
        return f"cannot use {where}: {reason}"
    if isinstance(exc, BrokenPipeError) or exc.errno in (errno.EPIPE, errno.ENOSPC, errno.EIO):
        return f"output failed: {reason}"
    return f"system error: {reason}"


def fail(message: str) -> NoReturn:
    """Print one error line and exit 1."""
    click.echo(f"ql3: error: {message}", err=True)
    sys.exit(1)


data_dir_option = click.option(
    "--data-dir",
    "data_dir",
    envvar=ENV_DATA_DIR,
    default=None,
    metavar="DIR",
    help=f"Data directory (default: ${ENV_DATA_DIR} or ~/.local/share/ql3).",
)
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON.")


def datadir_of(path: str | None) -> DataDir:
    """The DataDir for an option value (None: the default)."""
    return DataDir.at(path or default_data_dir())


def print_json(obj: Any) -> None:
    """Print ``obj`` as indented JSON on stdout."""
    click.echo(json.dumps(obj, indent=2, sort_keys=False, ensure_ascii=False))


def wait_terminal(backend: Any, run_id: str) -> dict[str, Any]:
    """Poll a run until it is terminal; returns its final view."""
    while True:
        view: dict[str, Any] = backend.call("run_get", run_id=run_id)
        if view["status"] in output.TERMINAL:
            return view
        time.sleep(STATUS_POLL_S)
