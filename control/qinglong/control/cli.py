"""``ql3 control ...``: migrate, readiness and retention commands (DESIGN.md §4.1, §4.3).

Resolved lazily by the ``ql3`` root (by module name), and itself imports psycopg only inside
commands, so ``ql3 --help`` and every ``ql3 local`` command load no cluster library.
"""

from __future__ import annotations

import json

import click

from qinglong.control.db.roles import DEFAULT_RUNTIME_ROLE

_url = click.option(
    "--database-url", envvar="QL3_DATABASE_URL", required=True,
    help="PostgreSQL URL (env QL3_DATABASE_URL).",
)
_role = click.option(
    "--runtime-role", envvar="QL3_RUNTIME_ROLE", default=DEFAULT_RUNTIME_ROLE,
    show_default=True, help="The least-privilege role the control service runs as.",
)
_json = click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")


@click.group()
def control() -> None:
    """The cluster control plane: PostgreSQL authority and log retention."""


@control.command()
@_url
@_role
def migrate(database_url: str, runtime_role: str) -> None:
    """Apply pending migrations under an advisory lock and set the runtime role's grants."""
    from qinglong.control.db.migrations import migrate as run_migrate
    from qinglong.control.db.pool import connect

    with connect(database_url) as conn:
        result = run_migrate(conn, runtime_role=runtime_role)
    click.echo(f"applied {len(result.applied)} migration(s): {', '.join(result.applied) or '-'}")
    if result.ahead:
        click.echo(f"schema ahead of code by additive migration(s): {', '.join(result.ahead)}")


@control.command()
@_url
@_role
@click.option("--log-bucket", envvar="QL3_LOG_BUCKET", default=None,
              help="Also check the log bucket's object store (env QL3_LOG_BUCKET): a canary "
                   "PUT and a DELETE with a wrong If-Match. Credentials come from the usual "
                   "AWS_* environment.")
@click.option("--s3-endpoint", envvar="QL3_S3_ENDPOINT", default=None,
              help="S3-compatible endpoint URL (env QL3_S3_ENDPOINT); default AWS.")
@_json
def readiness(database_url: str, runtime_role: str, log_bucket: str | None,
              s3_endpoint: str | None, as_json: bool) -> None:
    """Exit 0 when ready; otherwise exit 1 with the named reason.

    Reasons: migration_pending, migration_checksum_mismatch, schema_newer_than_code,
    runtime_role_invalid and, with --log-bucket, object_store_unavailable. A backend that
    ignores If-Match on DELETE is listed as degraded (object_store_unsafe) and stays ready.
    """
    from qinglong.control.db.pool import connect
    from qinglong.control.readiness import CapabilityProbe
    from qinglong.control.readiness import readiness as check

    probes: list[CapabilityProbe] = []
    if log_bucket:
        from qinglong.control.retention.objects import make_client
        from qinglong.control.retention.probe import object_store_capability

        probes.append(object_store_capability(make_client(s3_endpoint, timeout_s=5),
                                              log_bucket))
    with connect(database_url) as conn:
        verdict = check(conn, runtime_role=runtime_role, capabilities=probes)
    if as_json:
        click.echo(json.dumps(verdict.to_json(), sort_keys=True))
    elif verdict.ready:
        degraded = ", ".join(f"{c.name} ({c.reason})" for c in verdict.degraded)
        click.echo(f"ready; degraded: {degraded}" if degraded else "ready")
    if not verdict.ready:
        from qinglong.control.errors import NotReadyError

        raise NotReadyError(f"not ready: {verdict.reason} ({verdict.detail})")


@control.group()
def retention() -> None:
    """Run Attempt log retention (ADR-0379)."""


@retention.command()
@_url
@_json
def status(database_url: str, as_json: bool) -> None:
    """Controls by state, tombstones by outcome, and the manual backlog."""
    from qinglong.control.db.pool import connect
    from qinglong.control.retention.admin import retention_status

    with connect(database_url) as conn:
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
def retry(database_url: str, attempt_ids: tuple[str, ...]) -> None:
    """Make manual (or failed, unleased) controls due now with a reset failure count."""
    from qinglong.control.db.pool import connect
    from qinglong.control.retention.admin import retention_retry

    with connect(database_url) as conn:
        changed = retention_retry(conn, list(attempt_ids))
    for attempt_id in changed:
        click.echo(attempt_id)
    missing = sorted(set(attempt_ids) - set(changed))
    if missing:
        from qinglong.control.errors import RetryRefusedError

        raise RetryRefusedError(f"not retried (unknown, retired or leased): {' '.join(missing)}")


@retention.command()
@_url
@click.option("--log-bucket", envvar="QL3_LOG_BUCKET", required=True,
              help="Bucket of the If-Match probe's canary (env QL3_LOG_BUCKET). Credentials "
                   "come from the usual AWS_* environment.")
@click.option("--s3-endpoint", envvar="QL3_S3_ENDPOINT", default=None,
              help="S3-compatible endpoint URL (env QL3_S3_ENDPOINT); default AWS.")
@click.option("--replica-id", envvar="QL3_REPLICA_ID", default=None,
              help="This replica's id (env QL3_REPLICA_ID; default the host name). A random "
                   "incarnation is added per process.")
@click.option("--once", is_flag=True, help="Probe, run one bounded sweep, print its counts.")
@click.option("--claims", type=click.IntRange(1, 16), default=16, show_default=True,
              help="Rows claimed per sweep (ADR-0379 §4: at most 16).")
@click.option("--lease-s", type=click.FloatRange(5, 300), default=60.0, show_default=True,
              help="Claim lease in seconds (5..300).")
@click.option("--interval-s", type=click.FloatRange(min=0.01), default=5.0,
              show_default=True, help="Pause between sweeps in seconds.")
@_json
def sweep(database_url: str, log_bucket: str, s3_endpoint: str | None,
          replica_id: str | None, once: bool, claims: int, lease_s: float,
          interval_s: float, as_json: bool) -> None:
    """Retire due Run Attempt logs: claim, HEAD, exact delete, tombstone (ADR-0379 §3–§4).

    Without --once it sweeps until SIGTERM or SIGINT, then lets the sweep in flight finish
    its current row within the stop budget (exit 1 if it could not) and exits 0.
    """
    import signal
    import socket
    import threading

    from qinglong.control.db.pool import open_pool
    from qinglong.control.retention.claims import process_owner
    from qinglong.control.retention.objects import make_client
    from qinglong.control.retention.sweeper import RunAttemptLogRetentionSweeper

    config = RunAttemptLogRetentionSweeper.Config(
        claims_per_sweep=claims, deletes_per_sweep=claims, lease_s=lease_s,
        budget_s=min(20.0, lease_s / 2), interval_s=interval_s)
    owner = process_owner(replica_id or socket.gethostname())
    pool = open_pool(database_url, min_size=1, max_size=2)
    try:
        sweeper = RunAttemptLogRetentionSweeper(
            pool.connection, make_client(s3_endpoint), owner, probe_bucket=log_bucket,
            config=config)
        if once:
            verdict = sweeper.probe()
            result = sweeper.run_once()
            out = {"owner": str(owner), "object_store": verdict.status,
                   "claimed": result.claimed, "counts": dict(result.counts),
                   "elapsed_s": round(result.elapsed_s, 3)}
            if as_json:
                click.echo(json.dumps(out, sort_keys=True))
            else:
                counts = " ".join(f"{k}={v}" for k, v in sorted(result.counts.items()))
                click.echo(f"object store {verdict.status}; claimed {result.claimed}"
                           + (f": {counts}" if counts else ""))
            return
        stop = threading.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: stop.set())
        sweeper.start()
        click.echo(f"sweeping as {owner}; object store {sweeper.verdict.status}"
                   if sweeper.verdict else f"sweeping as {owner}")
        while not stop.wait(0.5):
            pass
        if not sweeper.stop():
            from qinglong.control.errors import DrainTimeoutError

            raise DrainTimeoutError(f"the running sweep did not drain within "
                                    f"{config.stop_budget_s:g} s; its rows stay leased")
        click.echo("stopped: the running sweep drained")
    finally:
        pool.close()
