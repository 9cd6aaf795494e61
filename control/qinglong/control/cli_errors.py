"""Input checks and one-line errors for ``ql3 control`` (DESIGN.md §4.1; ground rules: a
clear typed error, no secrets in messages).

``checked_database_url`` rejects what is not a PostgreSQL URL before any connection (exit 2)
and remembers the URL's password so ``external_error`` can redact it: libpq echoes the
connection string in some messages (a malformed percent-escape, a bad option). Library
exceptions (psycopg, psycopg_pool, botocore) become DatabaseUnavailableError or
ObjectStoreUnavailableError carrying the first line of their reason, redacted.
"""

from __future__ import annotations

import re
import urllib.parse

from qinglong.control.errors import DatabaseUnavailableError, ObjectStoreUnavailableError
from qinglong.control.redaction import redact, remember_secret
from qinglong.shared.errors import QinglongError, ValidationError

_SCHEMES = ("postgresql", "postgres")
_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")


def checked_database_url(url: str | None) -> str:
    """``url`` when it is a ``postgresql://`` or ``postgres://`` URL with valid escapes.

    Raises ValidationError (exit 2) naming the problem, never echoing the value. The URL's
    password (raw and decoded) is kept for redaction of later error messages.
    """
    if not url or not url.strip():
        raise ValidationError("--database-url", "is empty (give a postgresql:// URL or set "
                                                "QL3_DATABASE_URL)")
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:  # e.g. an unclosed IPv6 bracket
        raise ValidationError("--database-url", "is not a valid URL") from None
    if parts.scheme not in _SCHEMES:
        raise ValidationError("--database-url", "must be a postgresql:// URL")
    if _BAD_ESCAPE.search(url):
        raise ValidationError("--database-url", "has a malformed %-escape (write % as %25)")
    try:
        parts.port  # noqa: B018  (raises ValueError on a non-numeric port)
    except ValueError:
        hint = ""
        if "," in parts.netloc:
            hint = " (for several hosts use ?host=h1,h2&port=p1,p2)"
        elif "@" not in parts.netloc and "@" in url:  # a / or ? in the password cut it short
            hint = " (percent-encode @ : / ? in the user name or password, e.g. / as %2F)"
        raise ValidationError("--database-url", f"has an invalid port{hint}") from None
    if parts.password:
        remember_secret(parts.password, urllib.parse.unquote(parts.password))
    remember_secret(url)
    _check_parameters(url)
    return url


def _check_parameters(url: str) -> None:
    """ValidationError when libpq would refuse the URL's query parameters (an unknown name
    such as ``?foo=bar``), checked offline by libpq's own parser; values are not echoed."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    try:
        conninfo_to_dict(url)
    except psycopg.ProgrammingError as exc:
        name = re.search(r'invalid URI query parameter: "(\w{1,64})"', str(exc))
        what = f"an unknown query parameter {name.group(1)!r}" if name else (
            "a connection parameter libpq cannot parse")
        raise ValidationError("--database-url", f"has {what}") from None


def external_error(exc: BaseException) -> QinglongError | None:
    """The typed one-line error for a library exception, or None for anything else."""
    module = type(exc).__module__ or ""
    name = type(exc).__name__
    if module.startswith(("psycopg", "psycopg_pool")):
        sqlstate = getattr(exc, "sqlstate", None)
        reason = redact(str(exc)) or name
        if name == "PoolTimeout":
            reason = "no connection could be opened in time (see the server's reason above)"
        hint = ""
        if sqlstate == "42P01":
            hint = " (is the schema migrated? run `ql3 control migrate`)"
        elif sqlstate == "42501":
            hint = " (the role lacks a privilege this command needs)"
        return DatabaseUnavailableError(f"database: {reason}{hint}")
    if module.startswith(("botocore", "boto3")):
        return ObjectStoreUnavailableError(f"object store: {name}: {redact(str(exc))}")
    return None
