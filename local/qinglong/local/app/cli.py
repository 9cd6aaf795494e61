"""The ``ql3`` command line (docs/protocols.md §3.8).

Exit codes: 0 success, 2 usage errors, 1 any other error with one line on stderr.
``--json`` prints machine-readable output.
"""

from __future__ import annotations

import contextlib
import sys

import click

from qinglong.local.app.cli_common import (
    data_dir_option,
    datadir_of,
    os_error_message,
)
from qinglong.local.app.display import display_options
from qinglong.shared.errors import (
    NotFoundError,
    QinglongError,
    RunNotSucceededError,
    ValidationError,
)


class _Lazy(click.Group):
    """A group whose ``lazy`` commands (name -> ``module:attribute``) are imported when one
    is resolved (click's "Lazily Loading Subcommands"): a command loads its own module only,
    and ``--help`` the command modules, which import their engine inside the commands
    (docs/architecture.md §1, "Each command loads what it runs")."""

    lazy: dict[str, str] = {}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *self.lazy])

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.lazy:
            return super().get_command(ctx, cmd_name)
        import importlib

        module, _, attribute = self.lazy[cmd_name].partition(":")
        found = getattr(importlib.import_module(module), attribute)
        return found if isinstance(found, click.Command) else None


class _LazyGroup(_Lazy):
    """Resolves cluster subcommands by module name at invocation (docs/architecture.md §1).

    ``ql3 local ...`` never imports them, and import-linter sees no local -> control import.
    """

    lazy = {"control": "qinglong.control.cli:control", "worker": "qinglong.worker.cli:worker",
            "cluster": "qinglong.client.cli:cluster"}

    def list_commands(self, ctx: click.Context) -> list[str]:
        """Own commands plus the cluster ones whose package is installed (found, not imported)."""
        import importlib.util

        installed = [name for name, where in self.lazy.items()
                     if importlib.util.find_spec(where.partition(":")[0].rpartition(".")[0])
                     is not None]
        return sorted([*click.Group.list_commands(self, ctx), *installed])

    needs = {"cluster": "httpx", "worker": "httpx"}  # imported inside their commands

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.needs:  # only then: `ql3 local serve` stays lean (ADR-0069)
            import importlib.util

            if importlib.util.find_spec(self.needs[cmd_name]) is None:
                return _missing_command(cmd_name)
        try:
            return super().get_command(ctx, cmd_name)
        except ModuleNotFoundError:
            if cmd_name not in self.lazy:
                raise
            # our cluster package, or a library only it brings (httpx after the
            # install of scripts/demo.sh, which has no cluster): the command stands in as one
            # that says what to install, so `ql3 --help` still lists and prints
            return _missing_command(cmd_name)


def _missing_command(name: str) -> click.Command:
    """A stand-in for ``ql3 control|worker|cluster`` whose code or libraries are not
    installed: listed by ``ql3 --help``, and any use (``--help`` included) exits 2 with
    :class:`ClusterPackageMissingError`'s one line."""

    def refuse() -> None:
        raise ClusterPackageMissingError(name)

    return click.Command(
        name, callback=refuse, add_help_option=False,
        help="(not installed: needs the qinglong-cluster distribution)",
        context_settings={"ignore_unknown_options": True, "allow_extra_args": True})


class ClusterPackageMissingError(click.ClickException):
    """``ql3 control|worker|cluster`` where only the edge/standalone distribution is installed
    (docs/architecture.md §1: the cluster code is the ``qinglong-cluster`` distribution).
    Exit 2 (as a missing ``control`` extra) with one line naming what to install."""

    exit_code = 2

    def __init__(self, command: str) -> None:
        what = "[control]" if command == "control" else ""
        super().__init__(
            f"`ql3 {command}` is part of the cluster distribution, which is not installed: "
            f"install `qinglong-cluster{what}` beside this one (README, \"Install on a server\")")


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(None, "--version", package_name="qinglong", prog_name="ql3")
def main() -> None:
    """Qinglong 3 runtime: register scripts with cron schedules, run them durably, read logs."""


class _LocalGroup(_Lazy):
    lazy = {name: f"qinglong.local.app.{where}" for name, where in {
        "task": "cli_tasks:task", "run": "cli_runs:run", "runs": "cli_runs:runs",
        "logs": "cli_runs:logs", "cancel": "cli_runs:cancel", "inspect": "cli_runs:inspect",
        "recovery": "cli_runs:recovery", "serve": "cli_serve:serve", "web": "cli_web:web",
        "import-qinglong": "cli_import:import_qinglong", "vars": "cli_vars:vars_group",
        "settings": "cli_settings:settings_group", "notify": "cli_settings:notify_group",
    }.items()}


@main.group(cls=_LocalGroup)
def local() -> None:
    """The local profile: one machine, an embedded SQLite store, local processes.

    Start with `ql3 local init`, add tasks with `ql3 local task add`, keep schedules
    running with `ql3 local serve`.
    """


@local.command()
@data_dir_option
@click.option(
    "--profile",
    type=click.Choice(["edge", "standalone"]),
    default=None,
    help="edge: small devices (2 concurrent attempts); standalone: servers (8). "
    "Default: standalone for a new directory, the current profile for an existing one.",
)
@click.option("--change-profile", is_flag=True,
              help="Switch an initialised directory to another --profile on purpose.")
def init(data_dir: str | None, profile: str | None, change_profile: bool) -> None:
    """Create and initialise a data directory (idempotent).

    An initialised directory keeps its profile: asking for another one is refused unless
    --change-profile says so.
    """
    from qinglong.local.app.store import PROFILE_KEY, LocalStore
    from qinglong.local.process.receipt_store import ReceiptStore
    from qinglong.shared.ids import uuid7

    datadir = datadir_of(data_dir)
    datadir.create()
    if not datadir.initialised():
        from qinglong.local.storage.migrations import open_database

        open_database(datadir.db_path).close()
    store = LocalStore(datadir, "init")
    try:
        current = store.repo.get_setting(PROFILE_KEY)
        chosen = profile or current or "standalone"
        if current is not None and chosen != current and not change_profile:
            raise ValidationError(
                "profile", f"{datadir.root} is already initialised with profile {current}; "
                f"add --change-profile to switch it to {chosen}")
        store.repo.set_setting(PROFILE_KEY, chosen)
        receipts = ReceiptStore(datadir.receipt_root)
        for shard in range(256):  # every receipt shard now, so no launch pays a directory fsync
            receipts.prepare_shard(uuid7()[:-2] + f"{shard:02x}")
    finally:
        store.close()
    if current is not None and chosen != current:
        click.echo(f"initialised {datadir.root} (profile changed from {current} to {chosen}; "
                   "a running serve keeps the old one until it restarts)")
    else:
        click.echo(f"initialised {datadir.root} (profile {chosen})")


@local.command()
@display_options
@data_dir_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def status(data_dir: str | None, as_json: bool) -> None:
    """Show the data directory, its profile, its owner and counts of tasks and runs.

    The owner is the process that holds the directory: `serve`, a foreground `run`, or none.
    """
    from qinglong.local.app.status import read_status

    view = read_status(datadir_of(data_dir))
    if as_json:
        import json

        click.echo(json.dumps(view, indent=2, ensure_ascii=False))
        return
    from qinglong.local.app.status import describe_status

    for line in describe_status(view):  # paths print whole: they are copied
        click.echo(line)


def run_main(argv: list[str] | None = None) -> int:
    """Entry point that maps typed errors to one stderr line and exit code 1."""
    try:
        code = main.main(args=argv, prog_name="ql3", standalone_mode=False)
        if isinstance(code, int) and code:  # ctx.exit(n) is returned, not raised
            return code
    except click.exceptions.Exit as exc:
        return int(exc.exit_code or 0)
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except click.exceptions.Abort:
        click.echo("ql3: aborted", err=True)
        return 1
    except (ValidationError, NotFoundError) as exc:  # bad input or an unknown name: exit 2
        click.echo(f"ql3: error: {exc}", err=True)
        return 2
    except RunNotSucceededError as exc:
        click.echo(f"ql3: {exc}", err=True)
        return 1
    except QinglongError as exc:
        click.echo(f"ql3: error: {exc}", err=True)
        return 1
    except KeyboardInterrupt:
        return 130
    except OSError as exc:  # a file we were asked to use, or stdout (full disk, closed pipe)
        with contextlib.suppress(OSError):
            click.echo(f"ql3: error: {os_error_message(exc)}", err=True)
        return 1
    return 0


def entry() -> None:
    """Console script ``ql3``."""
    code = run_main()
    with contextlib.suppress(OSError):
        sys.stdout.flush()
    sys.exit(code)


