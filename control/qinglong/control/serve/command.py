"""``ql3 control serve``: run one control replica (docs/protocols.md §4.5; issue 11 item 8).

Registered on the ``ql3 control`` group by ``control/cli.py``; its errors are mapped there
(one redacted line, exit 1; bad input exit 2).
"""

from __future__ import annotations

from typing import Any

import click

_LISTEN_HELP = ("host:port the HTTP API listens on (env QL3_LISTEN). Use 0.0.0.0:8080 in a "
                "container.")


def _listen(value: str) -> tuple[str, int]:
    from qinglong.shared.errors import ValidationError

    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ValidationError("--listen", "must be HOST:PORT with a port 1..65535")
    return host.strip("[]"), int(port)


@click.command()
@click.option("--database-url", envvar="QL3_DATABASE_URL", required=True,
              help="PostgreSQL URL of a login that is a member of the runtime role and "
                   "nothing more (env QL3_DATABASE_URL). Several hosts with "
                   "target_session_attrs=read-write follow a failover.")
@click.option("--runtime-role", envvar="QL3_RUNTIME_ROLE", default="ql3_runtime",
              show_default=True, help="The runtime role whose grants readiness checks.")
@click.option("--listen", envvar="QL3_LISTEN", default="127.0.0.1:8080", show_default=True,
              help=_LISTEN_HELP)
@click.option("--log-bucket", envvar="QL3_LOG_BUCKET", required=True,
              help="Bucket of the workers' logs (env QL3_LOG_BUCKET). Credentials come "
                   "from the usual AWS_* environment.")
@click.option("--s3-endpoint", envvar="QL3_S3_ENDPOINT", default=None,
              help="S3-compatible endpoint URL (env QL3_S3_ENDPOINT); default AWS.")
@click.option("--replica-id", envvar="QL3_REPLICA_ID", default=None,
              help="This replica's name in logs and claims (env QL3_REPLICA_ID; default the "
                   "host name).")
@click.option("--lease-ms", envvar="QL3_LEASE_MS", type=click.IntRange(1000, 3_600_000),
              default=30_000, show_default=True,
              help="Dispatch lease handed to workers, in ms.")
@click.option("--heartbeat-ms", envvar="QL3_HEARTBEAT_MS", type=click.IntRange(100, 1_200_000),
              default=10_000, show_default=True,
              help="Worker heartbeat period in ms; at most a third of the lease.")
@click.option("--scheduler-tick-ms", type=click.IntRange(50, 60_000), default=500,
              show_default=True, help="Longest pause between scheduler ticks, in ms.")
@click.option("--drain-s", type=click.FloatRange(0, 600), default=20.0, show_default=True,
              help="Seconds requests in flight may take after SIGTERM.")
@click.option("--max-pushes", envvar="QL3_MAX_PUSHES", type=click.IntRange(1, 64), default=2,
              show_default=True,
              help="Bundle pushes received and checked at once; more answer 429 (each "
                   "spools up to 32 MiB in the temporary directory).")
@click.option("--secrets-keyring", envvar="QL3_SECRETS_KEYRING", default=None,
              help="File of the keyring sealing secret values (env QL3_SECRETS_KEYRING; "
                   "docs/operations.md). Required once `secrets enable` ran.")
@click.option("--default-timezone", envvar="QL3_DEFAULT_TIMEZONE", default=None, metavar="TZ",
              help="IANA zone of a new task that names none (wins over the zone the "
                   "caller's client sends; an explicit --timezone wins over both).")
@click.option("--trusted-proxy", "trusted_proxy", envvar="QL3_TRUSTED_PROXY", default=None,
              metavar="ADDR[,ADDR]",
              help="Reverse proxies (IP addresses or networks like 10.0.0.0/8; env "
                   "QL3_TRUSTED_PROXY) whose X-Forwarded-For and X-Forwarded-Proto the web "
                   "panel at /ui believes, for the sign-in throttle's client address and the "
                   "cookie's Secure flag; from any other peer they are ignored (default: "
                   "none).")
def serve(database_url: str, runtime_role: str, listen: str, log_bucket: str,
          s3_endpoint: str | None, replica_id: str | None, lease_ms: int,
          heartbeat_ms: int, scheduler_tick_ms: int, drain_s: float,
          max_pushes: int, secrets_keyring: str | None, default_timezone: str | None,
          trusted_proxy: str | None) -> None:
    """Run a control replica: the HTTP API (OpenAPI at /openapi.json, /livez, /readyz,
    /metrics), the scheduler, lease recovery, retention enrollment and log retention.

    Any number of replicas may share one database and bucket; none is a leader. A lost
    database is retried (backoff capped at 5 s) and reported by /readyz, never a crash.
    SIGTERM or SIGINT drains and exits 0. A login that is, or may act as, a superuser or the
    schema owner is refused (exit 2) when the database answers at start; otherwise /readyz
    reports it as runtime_login_privileged once it connects. Once sealing of secret values
    is on (`ql3 control secrets enable`), a replica without a keyring, or whose keyring
    lacks the primary key in use, is refused (exit 2); with one it seals the plaintext left
    in bounded batches.
    """
    import logging
    import socket

    from qinglong.control.cli_common import checked_bucket, s3_client, url_label
    from qinglong.control.cli_errors import checked_database_url
    from qinglong.control.db.roles import validate_role_name
    from qinglong.control.serve.replica import ControlReplica, ServeSettings

    database_url = checked_database_url(database_url, option="--database-url")
    validate_role_name(runtime_role)
    host, port = _listen(listen)
    checked_bucket(log_bucket)
    s3_client(s3_endpoint)  # checks the endpoint's shape (exit 2 on a malformed one)
    keyring = _keyring(secrets_keyring)
    trusted_proxies = _trusted_proxies(trusted_proxy)
    if default_timezone is not None:
        from qinglong.shared.cron import parse_schedule

        parse_schedule("@once", default_timezone)  # an unknown zone exits 2, with a guess
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("botocore", "urllib3", "psycopg", "sqlalchemy", "uvicorn.error"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    settings = ServeSettings(
        database_url=database_url, runtime_role=runtime_role, host=host, port=port,
        bucket=log_bucket, s3_endpoint=s3_endpoint,
        replica_id=(replica_id or socket.gethostname())[:60], lease_ms=lease_ms,
        heartbeat_ms=heartbeat_ms, scheduler_tick_ms=scheduler_tick_ms, drain_s=drain_s,
        max_pushes=max_pushes, default_timezone=default_timezone,
        trusted_proxies=trusted_proxies)
    replica = ControlReplica(settings, keyring=keyring)
    try:
        if replica.refuse_privileged_login(url_label()):
            replica.refuse_missing_keyring()
    except BaseException:
        replica.stop()
        raise
    replica.run()


def _trusted_proxies(value: str | None) -> tuple[str, ...]:
    """``--trusted-proxy``'s networks as strings (empty without one); a ValidationError
    naming the option (exit 2) for an entry that is no address or network, or when the
    panel it applies to (``qinglong-panel``) is not installed."""
    from qinglong.shared.errors import ValidationError

    if not value:
        return ()
    try:
        from qinglong.panel.proxies import parse_trusted
    except ImportError:
        raise ValidationError("--trusted-proxy", "applies to the web panel, which is not "
                              "installed: install `qinglong-cluster[control]`") from None
    try:
        return tuple(str(net) for net in parse_trusted(value))
    except ValueError as exc:
        raise ValidationError("--trusted-proxy", str(exc).split(": ", 1)[-1]) from None


def _keyring(path: str | None) -> Any:
    """The keyring of ``--secrets-keyring`` (None without one); a ValidationError naming the
    option (exit 2) for an unreadable or malformed file, never its content."""
    if path is None:
        return None
    from qinglong.control.secrets.sealing import KeyringError
    from qinglong.control.secrets.store import load_keyring
    from qinglong.shared.errors import ValidationError

    try:
        return load_keyring(path)
    except KeyringError as exc:
        raise ValidationError("--secrets-keyring", str(exc)) from None
