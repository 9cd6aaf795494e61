"""``ql3 local serve``: the scheduler in the foreground (docs/protocols.md §3.6)."""

from __future__ import annotations

import signal
import sys
import threading
import time
from typing import TYPE_CHECKING

import click

from qinglong.local.app.cli_common import data_dir_option, datadir_of, fail
from qinglong.local.app.client import SocketBackend
from qinglong.local.app.datadir import OwnerLock
from qinglong.local.app.display import configure_logging, utc_option
from qinglong.shared.errors import (
    DataDirectoryBusyError,
    LocalApplicationStartupRecoveryRequiredError,
)

if TYPE_CHECKING:
    from qinglong.local.app.web_child import PanelChild

OWNER_WAIT_S = 5.0
DEFAULT_LISTEN = "127.0.0.1:5700"  # `ql3 local web`'s default too


@click.command("serve")
@data_dir_option
@click.option("--grace", type=click.FloatRange(0, 3600), default=None, metavar="SECONDS",
              help="TERM-to-KILL grace for running attempts at shutdown (profile default 5).")
@click.option("--detach", is_flag=True,
              help="On stop, leave running attempts running (for upgrades): the next start "
                   "re-attaches them and still enforces their timeouts.")
@click.option("--web", is_flag=True,
              help="Also serve the web panel (`ql3 local web`) as a child process, restarted "
                   "if it dies and stopped with serve (needs qinglong[web]).")
@click.option("--listen", default=None, metavar="HOST:PORT",
              help="With --web: where the panel listens (default 127.0.0.1:5700).")
@click.option("--trusted-proxy", "trusted_proxy", default=None, metavar="ADDR[,ADDR]",
              help="With --web: the reverse proxies whose X-Forwarded-For/-Proto the panel "
                   "believes (as `ql3 local web --trusted-proxy`).")
@utc_option
def serve(data_dir: str | None, grace: float | None, detach: bool, web: bool,
          listen: str | None, trusted_proxy: str | None) -> None:
    """Run the scheduler and accept commands until SIGTERM or SIGINT.

    Other `ql3 local` commands act through this process over a Unix socket in the data
    directory. At start, runs left by an earlier owner are recovered from their completion
    receipts and process identity (live ones are re-attached). On stop, running attempts
    are drained (TERM, a grace period, then KILL), or left running with --detach.

    With --web, the panel runs beside it as `ql3 local web` (its own process: serve loads
    none of it), prints its one-time sign-in link here, is restarted with backoff if it
    dies, and is stopped first on shutdown.
    """
    from qinglong.local.app.local_application import LocalApplication
    from qinglong.local.app.web_child import panel_installed

    if not web and (listen is not None or trusted_proxy is not None):
        raise click.UsageError("--listen and --trusted-proxy need --web")
    if web and not panel_installed():
        click.echo("ql3: error: the web panel is not installed: pip install 'qinglong[web]'",
                   err=True)
        sys.exit(2)

    configure_logging()  # our log lines: the viewer's zone with its offset, or --utc
    _one_malloc_arena()
    datadir = datadir_of(data_dir)
    datadir.require_initialised()
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # HUP: terminal closed
        signal.signal(sig, lambda *_: stop.set())
    app = LocalApplication(datadir, grace_s=grace, detach=detach)
    deadline = time.monotonic() + OWNER_WAIT_S
    while True:
        try:
            app.start()
            break
        except DataDirectoryBusyError:
            if SocketBackend.probe(datadir.socket_path):  # serve, or a foreground run
                holder = OwnerLock(datadir).holder().split()
                who = (f"a foreground `ql3 local run` (pid {holder[0]})"
                       if holder[1:] == ["run"] else "a ql3 local serve")
                fail(f"{who} is already running on {datadir.root}")
            if time.monotonic() >= deadline:  # a long foreground `run` or a wedged owner
                raise
            time.sleep(0.1)  # a short-lived command owns the directory for a moment
            app = LocalApplication(datadir, grace_s=grace, detach=detach)
        except LocalApplicationStartupRecoveryRequiredError as exc:
            fail(f"{exc}; see `ql3 local recovery status --verbose`, "
                 "then `ql3 local recovery resolve`")
    panel = None
    try:
        if web:
            panel = _start_panel(str(datadir.root), listen or DEFAULT_LISTEN,
                                 trusted_proxy)
        profile = app.store.profile.name if app.store is not None else "?"
        click.echo(f"ql3 serving {datadir.root} (profile {profile}); SIGTERM or Ctrl-C stops",
                   err=True)
        stop.wait()
        click.echo("ql3 stopping: draining admission, then "
                   + ("detaching from" if detach else "stopping") + " running attempts", err=True)
    finally:
        if panel is not None:
            panel.stop()
        app.stop()


M_ARENA_MAX = -8  # glibc's mallopt parameter (malloc.h)


def _one_malloc_arena() -> None:
    """Keep serve's threads on one glibc malloc arena. glibc gives every thread that
    allocates an arena of its own (up to eight per core); serve's mostly idle threads then
    hold about 1 MiB of arena pages, which an edge device pays for (ADR-0069's idle memory
    gate, integration/test_edge_memory.py), while serve runs one store operation at a time
    and gains nothing from them. Called before any thread starts. A no-op where the C
    library has no ``mallopt`` (musl, macOS) or ctypes is missing."""
    try:
        import ctypes

        ctypes.CDLL(None).mallopt(M_ARENA_MAX, 1)
    except (ImportError, OSError, AttributeError):
        pass


def _start_panel(root: str, listen: str, trusted_proxy: str | None) -> PanelChild:
    """The panel child, serving (its link printed); exits with the child's own status
    (2: a listen address or password file it refuses, 1: it cannot bind) when it ends
    before printing its link, after saying so on stderr (the child said why above)."""
    from qinglong.local.app.web_child import PanelChild

    panel = PanelChild(root, listen, trusted_proxy)
    status = panel.start()
    if status is not None:
        click.echo(f"ql3: error: the web panel did not start (status {status}); "
                   "serve stops", err=True)
        sys.exit(status)
    return panel
