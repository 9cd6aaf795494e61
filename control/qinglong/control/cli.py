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
