"""What several ``ql3 control`` commands share: option labels, the ``--database-url`` and
``--json`` options, a per-command engine, the schema check, and the S3 endpoint and bucket
checks (docs/protocols.md §4.1, §4.3).

It sits below every command module (``cli.py``, ``cli_tokens.py``, ``cli_secrets.py``,
``serve/command.py``) and imports none of them, so the commands import it and never each
other. Like them it imports SQLAlchemy, psycopg and boto3 only inside functions.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import click

from qinglong.control.cli_errors import checked_database_url

if TYPE_CHECKING:
    from sqlalchemy import Engine


def option_label(name: str, flag: str, envvar: str) -> str:
    """How an error names option ``name``: ``envvar`` when its value came from the
    environment, else ``flag`` (outside a click context: ``flag``)."""
    ctx = click.get_current_context(silent=True)
    source = ctx.get_parameter_source(name) if ctx is not None else None
    return envvar if source is click.core.ParameterSource.ENVIRONMENT else flag


def url_label() -> str:
    """``QL3_DATABASE_URL`` when ``--database-url``'s value came from the environment, else
    ``--database-url``."""
    return option_label("database_url", "--database-url", "QL3_DATABASE_URL")


def _check_url(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str:
    """The checked URL; an error names QL3_DATABASE_URL when the value came from there."""
    return checked_database_url(value, option=url_label())


url_option = click.option(
    "--database-url", envvar="QL3_DATABASE_URL", required=True, callback=_check_url,
    help="PostgreSQL URL, postgresql://... (env QL3_DATABASE_URL).",
)
json_option = click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")


@contextmanager
def command_engine(url: str, *, pool_size: int = 1, lock_timeout_ms: int | None = None
                   ) -> Iterator[Engine]:
    """A small engine (``db/engine.py``) for one command, disposed on exit; ``pool_size``
    connections, no overflow, ``lock_timeout_ms`` (milliseconds) per transaction when given."""
    from qinglong.control.db.engine import create_engine

    engine = create_engine(url, pool_size=pool_size, max_overflow=0,
                           lock_timeout_ms=lock_timeout_ms)
    try:
        yield engine
    finally:
        engine.dispose()


def require_schema(engine: Engine) -> None:
    """NotReadyError unless the ledger matches this code (the ledger part of readiness,
    docs/protocols.md §4.1)."""
    from qinglong.control.readiness import schema_readiness

    with engine.begin() as conn:
        verdict = schema_readiness(conn)
    if not verdict.ready:
        from qinglong.control.errors import NotReadyError

        hint = " (run `ql3 control migrate`)" if verdict.reason == "migration_pending" else ""
        raise NotReadyError(f"not ready: {verdict.reason} ({verdict.detail}){hint}")


def s3_client(endpoint: str | None) -> Any:
    """A boto3 S3 client for ``endpoint`` (None: AWS's default), 5 s timeouts;
    ValidationError (exit 2) naming ``--s3-endpoint`` or QL3_S3_ENDPOINT for a malformed
    URL, never the URL itself."""
    import urllib.parse

    from qinglong.shared.errors import ValidationError

    option = option_label("s3_endpoint", "--s3-endpoint", "QL3_S3_ENDPOINT")
    if endpoint is not None:
        if "@" in endpoint or "?" in endpoint or "#" in endpoint:
            # credentials come from the AWS environment, never the URL (a "/" in a password
            # would move the rest into the path, so "@" is refused anywhere); boto3 would send
            # a query or fragment nowhere useful
            raise ValidationError(option, "must be http(s)://host[:port][/path], without "
                                          "user-info, query or fragment")
        try:
            parts = urllib.parse.urlsplit(endpoint)
            port = parts.port  # raises ValueError on a bad or out-of-range port
        except ValueError:
            raise ValidationError(option, "is not a valid URL (host, port)") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValidationError(option, "must be an http:// or https:// URL")
        if port == 0:
            raise ValidationError(option, "has port 0 (give 1..65535)")
    from qinglong.control.retention.objects import make_client

    try:
        return make_client(endpoint, timeout_s=5)
    except ValueError:  # botocore's own check ("Invalid endpoint"): a host it cannot use
        raise ValidationError(option, "is not an endpoint URL botocore accepts (host name "
                                      "characters, no spaces)") from None


# S3 bucket names: today's rules are 3-63 lowercase letters, digits, "." and "-"; AWS still
# serves older us-east-1 buckets named with capitals and "_" (up to 255 characters), so
# those are accepted too (S3-compatible servers refuse them when asked). Never "..", never
# an IPv4 address, first and last character a letter or digit.
_BUCKET = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{1,253}[A-Za-z0-9]")
_IPV4 = re.compile(r"[0-9]{1,3}(\.[0-9]{1,3}){3}")


def checked_bucket(bucket: str) -> str:
    """``bucket`` when it is an S3 bucket name; ValidationError (exit 2) naming
    ``--log-bucket`` or QL3_LOG_BUCKET otherwise."""
    from qinglong.shared.errors import ValidationError

    option = option_label("log_bucket", "--log-bucket", "QL3_LOG_BUCKET")
    if not bucket.strip():
        raise ValidationError(option, "is empty")
    if not _BUCKET.fullmatch(bucket) or ".." in bucket or _IPV4.fullmatch(bucket):
        raise ValidationError(option, "is not a bucket name (3-63 lowercase letters, digits, "
                                      ". and -; not an IP address)")
    return bucket
