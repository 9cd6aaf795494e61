"""Options and helpers shared by the ``ql3 cluster`` commands: the connection options, the
display options (they set ``qinglong.shared.display.DISPLAY``), ``--json``, run references
and waiting for a run."""

from __future__ import annotations

import functools
import json
import os
import time
import urllib.parse
from collections.abc import Callable
from typing import Any, TypeVar

import click

from qinglong.client.http import DEFAULT_TIMEOUT_S, ControlClient
from qinglong.client.output import TERMINAL
from qinglong.shared.control_urls import parse_control_urls
from qinglong.shared.display import DISPLAY
from qinglong.shared.run_refs import parse_run_ref

F = TypeVar("F", bound=Callable[..., Any])
ENV_URL = "QL3_CONTROL_URL"
ENV_TOKEN = "QL3_TOKEN"  # noqa: S105 — the variable's name, not a token
WAIT_POLL_S = 0.5


def _set(attribute: str) -> Callable[[click.Context, click.Parameter, bool], bool]:
    def callback(_ctx: click.Context, _param: click.Parameter, value: bool) -> bool:
        setattr(DISPLAY, attribute, value)
        return value

    return callback


utc_option = click.option("--utc", is_flag=True, expose_value=False, callback=_set("utc"),
                          help="Print times in UTC (default: your local zone, with its "
                               "offset).")
wide_option = click.option("--wide", is_flag=True, expose_value=False, callback=_set("wide"),
                           help="Show full ids and every column, however wide.")
json_option = click.option("--json", "as_json", is_flag=True,
                           help="Print JSON (times in ISO-8601 UTC).")


def display_options(func: F) -> F:
    """``--utc`` and ``--wide``."""
    return utc_option(wide_option(func))


def connection(func: F) -> F:
    """Add ``--control-url`` (env ``QL3_CONTROL_URL``) and ``--http-timeout`` to a command and
    call it with ``client=`` a ControlClient holding the token of ``QL3_TOKEN`` (never an
    option: argv shows in ``ps`` and shell history). A bad URL list exits 2 naming the
    option or the variable it came from; a missing token exits 2 before anything is sent."""

    @functools.wraps(func)
    def wrapper(*args: Any, control_url: str | None, timeout_s: float, **kwargs: Any) -> Any:
        ctx = click.get_current_context()
        if not control_url:
            raise click.UsageError(f"Missing option '--control-url' (or set {ENV_URL}).", ctx)
        source = ctx.get_parameter_source("control_url")
        label = ENV_URL if source is click.core.ParameterSource.ENVIRONMENT else "--control-url"
        urls = parse_control_urls(control_url, label)
        with ControlClient(urls, os.environ.get(ENV_TOKEN), timeout_s=timeout_s) as client:
            return func(*args, client=client, **kwargs)

    url = click.option(
        "--control-url", "control_url", envvar=ENV_URL, default=None, metavar="URL[,URL…]",
        help="Base URL of control, http(s)://host:port, or several replicas' separated by "
             "commas (tried in order when one cannot be reached). Env QL3_CONTROL_URL. The "
             "token comes from QL3_TOKEN.")
    timeout = click.option(
        "--http-timeout", "timeout_s", type=click.FloatRange(0.1, 600), default=DEFAULT_TIMEOUT_S,
        show_default=True, metavar="SECONDS",
        help="Give up on a replica that does not connect or answer within this long.")
    return url(timeout(wrapper))  # type: ignore[return-value]


def print_json(obj: Any) -> None:
    """``obj`` as indented JSON on stdout (the API's shapes: times ISO-8601 UTC)."""
    click.echo(json.dumps(obj, indent=2, ensure_ascii=False))


def segment(name: str) -> str:
    """``name`` as one path segment (control answers 422 for a name it cannot hold)."""
    return urllib.parse.quote(name, safe="")


def resolve_run(client: ControlClient, ref: str) -> dict[str, Any]:
    """The run ``ref`` names (``TASK#N``, ``TASK@last``, a run id or its last 6+ hex
    digits), as ``GET /v1/runs/resolve`` answers it. Text that is no reference is refused
    here (NoSuchRunError, exit 2) before any request."""
    parse_run_ref(ref)
    run: dict[str, Any] = client.get("/v1/runs/resolve", params={"ref": ref.strip()}, run=ref)
    return run


def wait_terminal(client: ControlClient, run_id: str) -> dict[str, Any]:
    """Poll ``GET /v1/runs/{id}`` until the run is terminal; its final detail. Ctrl-C stops
    waiting (exit 130); the run goes on."""
    while True:
        view: dict[str, Any] = client.get(f"/v1/runs/{run_id}")
        if view["status"] in TERMINAL:
            return view
        time.sleep(WAIT_POLL_S)
