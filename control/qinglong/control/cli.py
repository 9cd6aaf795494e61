"""``ql3 control ...``: migrate, readiness and retention commands (docs/protocols.md §4.1, §4.3).

Resolved lazily by the ``ql3`` root (by module name), and itself imports SQLAlchemy and
psycopg only inside commands, so ``ql3 --help`` and every ``ql3 local`` command load no
cluster library. Every command reaches PostgreSQL through one engine of ``db/engine.py``.
Malformed input exits 2 before any connection; a database or object store that fails exits 1
with one redacted line (``cli_errors.py``), never a traceback.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import click

from qinglong.control.cli_common import checked_bucket as _checked_bucket
from qinglong.control.cli_common import command_engine as _engine
from qinglong.control.cli_common import json_option as _json
from qinglong.control.cli_common import option_label as _label
from qinglong.control.cli_common import require_schema as _require_schema
from qinglong.control.cli_common import s3_client as _s3_client
from qinglong.control.cli_common import url_label as _url_label
from qinglong.control.cli_common import url_option as _url
from qinglong.control.cli_errors import external_error
from qinglong.control.db.roles import DEFAULT_RUNTIME_ROLE

if TYPE_CHECKING:
    from sqlalchemy import Engine


_role = click.option(
    "--runtime-role", envvar="QL3_RUNTIME_ROLE", default=DEFAULT_RUNTIME_ROLE,
    show_default=True, help="The least-privilege role the control service runs as.",
)
_endpoint = click.option(
    "--s3-endpoint", envvar="QL3_S3_ENDPOINT", default=None,
    help="S3-compatible endpoint URL, http(s)://host:port (env QL3_S3_ENDPOINT); default AWS.")


_EXTRA_MODULES = frozenset({"psycopg", "sqlalchemy", "boto3", "botocore"})  # [control]


class _ControlGroup(click.Group):
    """Maps psycopg/botocore exceptions of any subcommand to one typed, redacted line, and a
    missing ``control`` extra to the command that installs it."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except ModuleNotFoundError as exc:
            if (exc.name or "").partition(".")[0] not in _EXTRA_MODULES:
                raise
            from qinglong.control.errors import ControlExtraMissingError

            raise ControlExtraMissingError(
                "ql3 control", f"needs the 'control' extra ({exc.name} is not installed): "
                               "install `qinglong-cluster[control]` (in a clone: "
                               "`bash scripts/bootstrap.sh dev`)") from None
        except Exception as exc:
            mapped = external_error(exc)
            if mapped is None:
                raise
            raise mapped from None


@click.group(cls=_ControlGroup)
def control() -> None:
    """The cluster control plane: replicas (serve), schema (migrate), readiness, tokens and
    log retention."""


LOCK_TIMEOUT_MS = 10_000  # a sweep gives up a lock wait after 10 s (and retries next sweep)


@control.command()
@_url
@_role
@_json
def migrate(database_url: str, runtime_role: str, as_json: bool) -> None:
    """Apply pending migrations under an advisory lock and set the runtime role's grants.

    Run it as the migration owner. The runtime role must be another, non-superuser role
    that owns nothing here (exit 2 otherwise). --json prints
    {"applied": [...], "ahead": [...]} (migration names)."""
    from qinglong.control.db.migrations import migrate as run_migrate
    from qinglong.control.db.roles import validate_role_name

    validate_role_name(runtime_role)
    with _engine(database_url) as engine, engine.connect() as conn:
        result = run_migrate(conn, runtime_role=runtime_role, url_option=_url_label())
    if as_json:
        click.echo(json.dumps({"applied": list(result.applied), "ahead": list(result.ahead)},
                              sort_keys=True))
        return
    # one migration a line: every line within 80 columns
    click.echo(f"applied {len(result.applied)} migration(s)" + (":" if result.applied else ""))
    for name in result.applied:
        click.echo(f"  {name}")
    if result.ahead:
        click.echo("schema ahead of code by additive migration(s):")
        for name in result.ahead:
            click.echo(f"  {name}")


@control.command()
@_url
@_role
@click.option("--log-bucket", envvar="QL3_LOG_BUCKET", default=None,
              help="Also check the log bucket's object store (env QL3_LOG_BUCKET): a canary "
                   "PUT and a DELETE with a wrong If-Match. Credentials come from the usual "
                   "AWS_* environment.")
@_endpoint
@_json
def readiness(database_url: str, runtime_role: str, log_bucket: str | None,
              s3_endpoint: str | None, as_json: bool) -> None:
    """Exit 0 when ready; otherwise exit 1 with the named reason.

    Reasons: migration_pending, migration_checksum_mismatch, schema_newer_than_code,
    runtime_role_invalid and, with --log-bucket, object_store_unavailable. A backend that
    ignores If-Match on DELETE is listed as degraded (object_store_unsafe) and stays ready.
    """
    from qinglong.control.db.roles import validate_role_name
    from qinglong.control.readiness import CapabilityProbe
    from qinglong.control.readiness import readiness as check
    from qinglong.shared.errors import ValidationError

    validate_role_name(runtime_role)
    if log_bucket is not None:
        _checked_bucket(log_bucket)
    elif s3_endpoint and _label("s3_endpoint", "flag", "env") == "flag":
        # an endpoint from QL3_S3_ENDPOINT alone (a shared service environment) just goes
        # unused by a database-only check; given as a flag it asks for a bucket to check
        raise ValidationError("--s3-endpoint", "needs --log-bucket (the bucket to check)")
    probes: list[CapabilityProbe] = []
    if log_bucket:
        from qinglong.control.retention.probe import object_store_capability

        probes.append(object_store_capability(_s3_client(s3_endpoint), log_bucket))
    try:
        with _engine(database_url) as engine:
            verdict = check(engine, runtime_role=runtime_role, capabilities=probes)
    except Exception as exc:
        mapped = external_error(exc)
        if mapped is None:
            raise
        if as_json:  # a JSON consumer still gets a verdict on stdout
            click.echo(json.dumps({"ready": False, "reason": "database_unavailable",
                                   "detail": str(mapped), "degraded": [],
                                   "schema_ahead_by": []}, sort_keys=True))
        raise mapped from None
    if as_json:
        click.echo(json.dumps(verdict.to_json(), sort_keys=True))
    elif verdict.ready:
        degraded = ", ".join(f"{c.name} ({c.reason}: {c.detail})" for c in verdict.degraded)
        click.echo(f"ready; degraded: {degraded}" if degraded else "ready")
    if not verdict.ready:
        from qinglong.control.errors import NotReadyError

        raise NotReadyError(f"not ready: {verdict.reason} ({verdict.detail})")


@control.group()  # its errors are mapped by the ``control`` group it runs under
def retention() -> None:
    """Run Attempt log retention (ADR-0379)."""


@retention.command()
@_url
@_json
def status(database_url: str, as_json: bool) -> None:
    """Controls by state, tombstones by outcome, and the manual backlog."""
    from qinglong.control.retention.admin import retention_status

    with _engine(database_url) as engine:
        _require_schema(engine)
        with engine.connect() as conn:
            out = retention_status(conn)
    if as_json:
        click.echo(json.dumps(out, sort_keys=True))
        return
    click.echo(" ".join(f"{k}={v}" for k, v in out["controls"].items()))
    click.echo(" ".join(f"{k}={v}" for k, v in out["tombstones"].items()))
    for row in out["manual"]:
        click.echo(f"manual {row['attempt_id']} {row['last_failure_class']} "
                   f"failures={row['failure_count']}")


@retention.command()
@_url
@click.argument("attempt_ids", nargs=-1, required=True)
@_json
def retry(database_url: str, attempt_ids: tuple[str, ...], as_json: bool) -> None:
    """Make manual (or failed, unleased) controls due now with a reset failure count.

    Prints each attempt id it changed; exits 1 naming the ids it left alone (unknown,
    already retired, or under a live lease). --json prints
    {"retried": [...], "not_retried": [...]} first (same exit codes)."""
    from qinglong.control.retention.admin import retention_retry
    from qinglong.shared.errors import ValidationError
    from qinglong.shared.ids import validate_uuid7

    attempt_ids = tuple(dict.fromkeys(a.strip().lower() for a in attempt_ids))  # once each
    for position, attempt_id in enumerate(attempt_ids, 1):
        try:
            validate_uuid7(attempt_id, "attempt_id")
        except ValidationError:
            raise ValidationError("ATTEMPT_ID", f"argument {position} is not a UUIDv7 "
                                                "attempt id") from None
    with _engine(database_url) as engine:
        _require_schema(engine)
        with engine.connect() as conn:
            changed = retention_retry(conn, list(attempt_ids))
    missing = sorted(set(attempt_ids) - set(changed))
    if as_json:
        click.echo(json.dumps({"retried": list(changed), "not_retried": missing},
                              sort_keys=True))
    else:
        for attempt_id in changed:
            click.echo(attempt_id)
    if missing:
        from qinglong.control.errors import RetryRefusedError

        raise RetryRefusedError("not retried (unknown, retired, under a live lease, or never "
                                f"failed): {' '.join(missing)}")


def _sweep_line(result: Any, as_json: bool, **extra: Any) -> str:
    if as_json:
        return json.dumps({**extra, "claimed": result.claimed, "counts": dict(result.counts),
                           "elapsed_s": round(result.elapsed_s, 3)}, sort_keys=True)
    counts = " ".join(f"{k}={v}" for k, v in sorted(result.counts.items()))
    store = f"object store {extra['object_store']}; " if "object_store" in extra else ""
    return f"{store}claimed {result.claimed}" + (f": {counts}" if counts else "")


@retention.command()
@_url
@click.option("--log-bucket", envvar="QL3_LOG_BUCKET", required=True,
              help="Bucket of the If-Match probe's canary (env QL3_LOG_BUCKET). Credentials "
                   "come from the usual AWS_* environment.")
@_endpoint
@click.option("--replica-id", envvar="QL3_REPLICA_ID", default=None,
              help="This replica's id (env QL3_REPLICA_ID; default the host name). A random "
                   "incarnation is added per process.")
@click.option("--once", is_flag=True, help="Probe, run one bounded sweep, print its counts.")
@click.option("--claims", type=click.IntRange(1, 16), default=16, show_default=True,
              help="Rows claimed per sweep (ADR-0379 §4: at most 16).")
@click.option("--lease-s", type=click.FloatRange(5, 300), default=60.0, show_default=True,
              help="Claim lease in seconds (5..300).")
@click.option("--interval-s", type=click.FloatRange(0.01, 3600), default=5.0,
              show_default=True, help="Pause between sweeps in seconds (0.01..3600).")
@_json
def sweep(database_url: str, log_bucket: str, s3_endpoint: str | None,
          replica_id: str | None, once: bool, claims: int, lease_s: float,
          interval_s: float, as_json: bool) -> None:
    """Retire due Run Attempt logs: claim, HEAD, exact delete, tombstone (ADR-0379 §3–§4).

    Connect with the runtime role's URL: a superuser or the schema owner is refused (exit
    2). Refuses to start unless the schema is migrated for this code. While the object
    store is unavailable it claims nothing and re-probes. Without --once it sweeps until
    SIGTERM or SIGINT, printing a line per busy sweep; a signal lets the sweep in flight
    finish its current row (rows it had not reached stay leased until their lease ends).
    Exit 1 if the store is unavailable (--once) or the stop budget ran out.
    """
    import socket

    from qinglong.control.db.roles import refuse_privileged_session
    from qinglong.control.retention.claims import process_owner
    from qinglong.control.retention.sweeper import RunAttemptLogRetentionSweeper
    from qinglong.shared.errors import ValidationError

    _checked_bucket(log_bucket)
    if replica_id is not None and not replica_id.strip():
        raise ValidationError("--replica-id", "is empty")
    client = _s3_client(s3_endpoint)
    config = RunAttemptLogRetentionSweeper.Config(
        claims_per_sweep=claims, deletes_per_sweep=claims, lease_s=lease_s,
        budget_s=min(20.0, lease_s / 2), interval_s=interval_s)
    owner = process_owner(replica_id or socket.gethostname())
    with _engine(database_url, pool_size=2, lock_timeout_ms=LOCK_TIMEOUT_MS) as engine:
        _require_schema(engine)
        with engine.begin() as conn:
            refuse_privileged_session(conn, _url_label())
        _sweep_until_stopped(engine, client, owner, log_bucket, config, once=once,
                             as_json=as_json)


def _sweep_until_stopped(engine: Engine, client: Any, owner: Any, log_bucket: str,
                         config: Any, *, once: bool, as_json: bool) -> None:
    """The body of ``retention sweep`` once the engine is checked: one sweep (``once``) or
    sweeps until SIGTERM/SIGINT, then drain. Raises ObjectStoreUnavailableError (``once``,
    store unavailable) or DrainTimeoutError (stop budget spent)."""
    import logging
    import signal
    import time

    from qinglong.control.errors import DrainTimeoutError, ObjectStoreUnavailableError
    from qinglong.control.retention.sweeper import RunAttemptLogRetentionSweeper

    sweeper = RunAttemptLogRetentionSweeper(engine, client, owner,
                                            probe_bucket=log_bucket, config=config)
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: sweeper.request_stop())
    if once:  # the verdict is reported below: no second copy from the sweeper's log
        logging.getLogger("qinglong.control.retention.sweeper").setLevel(logging.ERROR)
        result = sweeper.run_once()
        verdict = sweeper.verdict
        store = verdict.status if verdict else "unknown"
        click.echo(_sweep_line(result, as_json, owner=str(owner), object_store=store))
        if store == "unavailable":
            raise ObjectStoreUnavailableError(
                f"object store unavailable: {verdict.reason if verdict else '-'}")
        return
    sweeper.on_sweep = lambda result: click.echo(_sweep_line(result, as_json))
    sweeper.start()
    verdict = sweeper.verdict
    started = {"event": "started", "owner": str(owner),
               "object_store": verdict.status if verdict else "unknown"}
    click.echo(json.dumps(started, sort_keys=True) if as_json else
               f"sweeping as {owner}; object store {started['object_store']}")
    while sweeper.running() and not sweeper.stop_requested():
        time.sleep(0.2)
    drained = sweeper.stop()
    stopped = {"event": "stopped", "drained": drained}
    if as_json:
        click.echo(json.dumps(stopped, sort_keys=True))
    elif drained:
        click.echo("stopped: any sweep in flight finished its current row; rows it had "
                   "claimed but not reached stay leased until their lease ends")
    if not drained:
        raise DrainTimeoutError(f"the running sweep did not end within "
                                f"{config.stop_budget_s:g} s (blocked in the database or "
                                "the object store); any rows it holds stay leased")


def _add_commands() -> None:
    """``token`` (cli_tokens.py), ``secrets`` (cli_secrets.py), ``history`` (cli_history.py)
    and ``serve`` (serve/command.py) live in their own modules; none imports anything heavy at
    module level."""
    from qinglong.control.cli_history import history
    from qinglong.control.cli_secrets import secrets
    from qinglong.control.cli_tokens import token
    from qinglong.control.serve.command import serve

    control.add_command(secrets)
    control.add_command(token)
    control.add_command(history)
    control.add_command(serve)


_add_commands()
