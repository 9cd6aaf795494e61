"""Input checks and one-line errors for ``ql3 control`` (docs/protocols.md §4.1; ground rules: a
clear typed error, no secrets in messages).

``checked_database_url`` rejects what is not a PostgreSQL URL before any connection (exit 2)
and remembers the URL's password so ``external_error`` can redact it: libpq echoes the
connection string in some messages (a malformed percent-escape, a bad option). Library
exceptions (SQLAlchemy, unwrapped to the psycopg error it carries; psycopg; botocore) become
DatabaseUnavailableError or
ObjectStoreUnavailableError carrying the first line of their reason, redacted.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Mapping

from qinglong.control.errors import DatabaseUnavailableError, ObjectStoreUnavailableError
from qinglong.control.redaction import redact, remember_secret
from qinglong.shared.errors import QinglongError, ValidationError

_SCHEMES = ("postgresql", "postgres")
_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")


def checked_database_url(url: str | None, *, option: str = "--database-url") -> str:
    """``url`` when it is a ``postgresql://`` or ``postgres://`` URL with valid escapes,
    known query parameters and valid values for the enumerated and integer ones.

    Raises ValidationError (exit 2) naming the problem under ``option`` (the flag, or
    ``QL3_DATABASE_URL`` when the value came from the environment), never echoing the
    value. The URL's password (raw and decoded) is kept for redaction of later messages.
    """
    if not url or not url.strip():
        raise ValidationError(option, "is empty (give a postgresql:// URL or set "
                                      "QL3_DATABASE_URL)")
    try:
        url.encode("utf-8")  # argv and the environment keep a non-UTF-8 byte as a surrogate
    except UnicodeEncodeError:
        raise ValidationError(option, "holds a byte that is not UTF-8 text") from None
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:  # e.g. an unclosed IPv6 bracket
        raise ValidationError(option, "is not a valid URL") from None
    if not url.startswith(tuple(f"{scheme}://" for scheme in _SCHEMES)):
        raise ValidationError(option, "must be a postgresql:// URL (libpq reads the scheme "
                                      "in lowercase only)")
    if _BAD_ESCAPE.search(url):
        raise ValidationError(option, "has a malformed %-escape (write % as %25)")
    if "@" in parts.netloc.rpartition("@")[0]:
        # libpq ends the user-info at the first "@", so the rest of the password would be
        # taken for the host name (and looked up in DNS)
        raise ValidationError(option, "has an @ in the user name or password (percent-encode "
                                      "it as %40)")
    if parts.password:
        remember_secret(parts.password, urllib.parse.unquote(parts.password))
    remember_secret(url)
    # hosts and ports (one or several: postgresql://u@h1:5432,h2:5433/db for a failover
    # pair) are checked as libpq parses them; a / or ? in the password cuts the user-info
    # short, and libpq then reads part of the password as a port
    cut = "@" not in parts.netloc and "@" in url
    _check_parameters(url, option, port_hint=(
        " (percent-encode @ : / ? in the user name or password, e.g. / as %2F)" if cut
        else " (1..65535 per host)"))
    return url


# libpq's enumerated connection parameters and their values (PostgreSQL docs, "Parameter
# Key Words"); checked only when present (the bundled libpq knows the newer ones)
_CHOICES = {
    "sslmode": ("disable", "allow", "prefer", "require", "verify-ca", "verify-full"),
    "gssencmode": ("disable", "prefer", "require"),
    "channel_binding": ("disable", "prefer", "require"),
    "target_session_attrs": ("any", "read-write", "read-only", "primary", "standby",
                             "prefer-standby"),
    "load_balance_hosts": ("disable", "random"),
    "sslnegotiation": ("postgres", "direct"),
    "sslcertmode": ("disable", "allow", "require"),
}
# integer parameters: libpq's parse_int_param (strtol, base 10, C-locale white space around
# it, within a C int); seconds or counts
_INTEGERS = ("keepalives", "keepalives_idle", "keepalives_interval", "keepalives_count",
             "tcp_user_timeout")
_INTEGER = re.compile(r"[ \t\n\v\f\r]*[-+]?[0-9]+[ \t\n\v\f\r]*")
_INT_MAX = 2**31 - 1


def _is_c_int(value: str) -> bool:
    """Whether libpq's parse_int_param reads ``value`` whole as a C int."""
    return bool(_INTEGER.fullmatch(value)) and -_INT_MAX - 1 <= int(value) <= _INT_MAX


def _is_timeout(value: str) -> bool:
    """Whether psycopg reads ``value`` as a connect_timeout (``int(float(value))``; psycopg,
    not libpq, enforces it). Empty means the default."""
    if not value.strip():
        return True
    try:
        int(float(value))
    except (ValueError, OverflowError):
        return False
    return True


def _check_parameters(url: str, option: str, *, port_hint: str) -> None:
    """ValidationError when libpq would refuse the URL's query parameters: an unknown name
    such as ``?foo=bar`` (libpq's own parser, offline), a value outside an enumerated
    parameter's choices (``?sslmode=bogus``), a non-integer where libpq wants one
    (``?connect_timeout=abc``) or a port outside 1..65535 (its message ends with
    ``port_hint``). Values are never echoed."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    try:
        params = conninfo_to_dict(url)
    except UnicodeError:  # e.g. %FF: psycopg reads parameters as UTF-8
        raise ValidationError(option, "has a %-escape that is not UTF-8 text") from None
    except psycopg.ProgrammingError as exc:
        name = re.search(r'invalid URI query parameter: "(\w{1,64})"', str(exc))
        what = f"an unknown query parameter {name.group(1)!r}" if name else (
            "a connection parameter libpq cannot parse")
        raise ValidationError(option, f"has {what}") from None
    for key, choices in _CHOICES.items():
        value = params.get(key)
        if value is not None and str(value) not in choices:
            raise ValidationError(option, f"has an invalid {key} (one of: "
                                          f"{', '.join(choices)})")
    for key in _INTEGERS:
        value = params.get(key)
        if value is not None and not _is_c_int(str(value)):
            raise ValidationError(option, f"has a {key} that is not an integer")
    timeout = params.get("connect_timeout")
    if timeout is not None and not _is_timeout(str(timeout)):
        raise ValidationError(option, "has a connect_timeout that is not a number of seconds")
    _check_hosts_and_ports(params, option, port_hint)


def _count(spec: object) -> int:
    """Entries of a comma-separated host, hostaddr or port list (0 when absent or empty)."""
    return len(str(spec).split(",")) if spec else 0


def _check_hosts_and_ports(params: Mapping[str, object], option: str,
                           port_hint: str) -> None:
    """libpq's rules: each port entry empty (the default) or an int in 1..65535; several
    ports only one per host; host and hostaddr lists of the same length when both given."""
    ports = params.get("port")
    if ports:
        for port in str(ports).split(","):
            if port and not (_is_c_int(port) and 1 <= int(port) <= 65535):
                raise ValidationError(option, f"has an invalid port{port_hint}")
    hosts, addrs = _count(params.get("host")), _count(params.get("hostaddr"))
    if hosts and addrs and hosts != addrs:
        raise ValidationError(option, "gives host and hostaddr lists of different lengths")
    if _count(ports) > 1 and _count(ports) != max(hosts, addrs, 1):
        raise ValidationError(option, "gives more ports than hosts (one port, or one per "
                                      "host)")


def external_error(exc: BaseException) -> QinglongError | None:
    """The typed one-line error for a library exception, or None for anything else.

    An SQLAlchemy ``DBAPIError`` is judged by the driver error it wraps (``.orig``), so the
    line carries the server's reason, never the statement."""
    module = type(exc).__module__ or ""
    name = type(exc).__name__
    if module.startswith("sqlalchemy"):
        orig = getattr(exc, "orig", None)
        if isinstance(orig, BaseException):
            return external_error(orig)
        reason = ("no connection could be opened in time" if name == "TimeoutError"
                  else name)
        return DatabaseUnavailableError(f"database: {reason}")
    if module.startswith("psycopg"):
        sqlstate = getattr(exc, "sqlstate", None)
        reason = redact(str(exc)) or name
        hint = ""
        if sqlstate == "42P01":
            hint = " (is the schema migrated? run `ql3 control migrate`)"
        elif sqlstate == "42501":
            hint = " (the role lacks a privilege this command needs)"
        return DatabaseUnavailableError(f"database: {reason}{hint}")
    if module.startswith(("botocore", "boto3")):
        return ObjectStoreUnavailableError(f"object store: {name}: {redact(str(exc))}")
    return None
