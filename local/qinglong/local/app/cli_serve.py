"""``ql3 local serve``: the scheduler in the foreground (docs/protocols.md §3.6)."""

from __future__ import annotations

import signal
import threading
import time

import click

from qinglong.local.app.cli_common import data_dir_option, datadir_of, fail
from qinglong.local.app.client import SocketBackend
from qinglong.local.app.datadir import OwnerLock
from qinglong.local.app.display import configure_logging, utc_option
from qinglong.shared.errors import (
    DataDirectoryBusyError,
    LocalApplicationStartupRecoveryRequiredError,
)

OWNER_WAIT_S = 5.0


@click.command("serve")
@data_dir_option
@click.option("--grace", type=click.FloatRange(0, 3600), default=None, metavar="SECONDS",
              help="TERM-to-KILL grace for running attempts at shutdown (profile default 5).")
@click.option("--detach", is_flag=True,
              help="On stop, leave running attempts running (for upgrades): the next start "
                   "re-attaches them and still enforces their timeouts.")
@utc_option
def serve(data_dir: str | None, grace: float | None, detach: bool) -> None:
    """Run the scheduler and accept commands until SIGTERM or SIGINT.

    Other `ql3 local` commands act through this process over a Unix socket in the data
    directory. At start, runs left by an earlier owner are recovered from their completion
    receipts and process identity (live ones are re-attached). On stop, running attempts
    are drained (TERM, a grace period, then KILL), or left running with --detach.
    """
    from qinglong.local.app.local_application import LocalApplication

    configure_logging()  # our log lines: the viewer's zone with its offset, or --utc
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
    try:
        profile = app.store.profile.name if app.store is not None else "?"
        click.echo(f"ql3 serving {datadir.root} (profile {profile}); SIGTERM or Ctrl-C stops",
                   err=True)
        stop.wait()
        click.echo("ql3 stopping: draining admission, then "
                   + ("detaching from" if detach else "stopping") + " running attempts", err=True)
    finally:
        app.stop()
