"""Time zones as people give them (docs/protocols.md §3.7 "Default zone"): the machine's own
IANA zone as the default of ``task add``, and a "did you mean" for a zone name this machine
does not know. Stdlib only.

- :func:`machine_zone`: ``TZ`` when it names an IANA zone (``Asia/Shanghai``,
  ``:Asia/Shanghai``, or a path into a zoneinfo directory), else the target of the
  ``/etc/localtime`` link below a ``zoneinfo/`` directory, else ``UTC`` with a note saying so
  (the caller prints it).
- :func:`suggest_zone`: ``asia/shanghai`` → ``Asia/Shanghai`` (case), the names Chinese users
  reach for first (``CST``, ``Asia/Beijing``, ``Beijing``, ``China``) → ``Asia/Shanghai``,
  else the closest name by ``difflib``; None when nothing is close.
- :func:`load_zone`: the ``tzinfo`` of a validated IANA name (``cron.py`` uses it; here,
  printing a time in a task's zone loads no croniter).
"""

from __future__ import annotations

import functools
import os
import zoneinfo
from datetime import UTC, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from qinglong.shared.errors import TimeZoneNotFoundError, ValidationError

LOCALTIME = "/etc/localtime"
# Names that are no IANA zone but that people mean one by (China Standard Time first: the
# abbreviation is ambiguous elsewhere, but a Qinglong user means UTC+8).
ALIASES = {
    "cst": "Asia/Shanghai", "asia/beijing": "Asia/Shanghai", "beijing": "Asia/Shanghai",
    "china": "Asia/Shanghai", "china standard time": "Asia/Shanghai",
    "asia/chongqing": "Asia/Shanghai", "utc+8": "Asia/Shanghai", "gmt+8": "Asia/Shanghai",
    "hkt": "Asia/Hong_Kong", "jst": "Asia/Tokyo", "kst": "Asia/Seoul",
}


def _zone_from_path(path: str) -> str | None:
    marker = "zoneinfo/"
    at = path.find(marker)
    if at < 0:
        return None
    name = path[at + len(marker):]
    for prefix in ("posix/", "right/"):
        name = name.removeprefix(prefix)
    return name if _is_zone(name) else None


def _is_zone(name: str) -> bool:
    if not name or name.startswith("/") or ".." in name or name in ("localtime", "Factory"):
        return False
    try:
        zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
        return name == "UTC"
    return True


def machine_zone(environ: dict[str, str] | None = None,
                 localtime: str = LOCALTIME) -> tuple[str, str | None]:
    """``(zone, note)``: this machine's IANA zone and None, or ``("UTC", note)`` when none
    can be found (``note`` one sentence for the user). ``environ`` defaults to
    ``os.environ``; ``localtime`` is the link to read (tests point it elsewhere)."""
    env = os.environ if environ is None else environ
    tz = env.get("TZ", "").strip().removeprefix(":")
    if tz:
        if _is_zone(tz):
            return tz, None
        from_path = _zone_from_path(tz)
        if from_path is not None:
            return from_path, None
    try:
        target = os.path.realpath(localtime) if os.path.islink(localtime) else ""
        link = os.readlink(localtime) if os.path.islink(localtime) else ""
    except OSError:
        target = link = ""
    for path in (link, target):
        found = _zone_from_path(path) if path else None
        if found is not None:
            return found, None
    return "UTC", ("this machine names no time zone (TZ unset, /etc/localtime no zoneinfo "
                   "link): schedules are read in UTC; give --timezone to choose one")


@functools.cache
def _zone_names() -> tuple[str, ...]:
    try:
        return tuple(sorted(zoneinfo.available_timezones()))
    except (OSError, ValueError):  # no tz database at all
        return ()


def suggest_zone(name: str) -> str | None:
    """The IANA zone ``name`` most likely meant, or None (module docstring)."""
    key = name.strip().lower()
    if key in ALIASES:
        return ALIASES[key]
    names = _zone_names()
    by_lower = {n.lower(): n for n in names}
    if key in by_lower:
        return by_lower[key]
    import difflib  # only when a name is not known as given

    close = difflib.get_close_matches(key, list(by_lower), n=1, cutoff=0.8)
    return by_lower[close[0]] if close else None


_NOT_ZONE_NAMES = frozenset({"localtime", "posixrules"})


def excerpt(value: str) -> str:
    """``value`` quoted for a message, cut after 16 characters."""
    return repr(value if len(value) <= 16 else value[:16] + "...")


TZDATA_HINT = "install the system tz database or `pip install qinglong[tzdata]`"


def _load_zone(name: str) -> tzinfo:
    if not name or len(name) > 100 or name.startswith("/") or ".." in name or "\\" in name:
        raise ValidationError("timezone", "timezone must be an IANA name such as Asia/Shanghai")
    if name in _NOT_ZONE_NAMES or name.startswith(("posix/", "right/")):
        # files of the system's zoneinfo directory, not zone names: `localtime` follows the
        # host's setting (a schedule must not move when the host is reconfigured), `right/`
        # counts leap seconds, which no cron does
        raise ValidationError("timezone", f"{excerpt(name)} is not an IANA time zone name;"
                              " name the zone, such as Asia/Shanghai or UTC")
    try:
        return ZoneInfo(name)
    except ZoneInfoNotFoundError as exc:
        if name == "UTC":  # the default zone works without any tz database
            return UTC
        if _has_tz_database():
            guess = suggest_zone(name)
            hint = (f"; did you mean {guess}?" if guess is not None and guess != name
                    else " (not in this machine's tz database)")
            raise TimeZoneNotFoundError(
                name, f"unknown IANA time zone {excerpt(name)}{hint}") from exc
        raise TimeZoneNotFoundError(
            name, f"time zone {excerpt(name)} not found: {TZDATA_HINT}") from exc
    except (ValueError, OSError) as exc:
        guess = suggest_zone(name)
        hint = f"; did you mean {guess}?" if guess is not None and guess != name else ""
        raise ValidationError("timezone",
                              f"unknown IANA time zone {excerpt(name)}{hint}") from exc


def _has_tz_database() -> bool:
    """True if zoneinfo finds any zone (the system's files on TZPATH, or the tzdata package)."""
    try:
        ZoneInfo("UTC")
    except ZoneInfoNotFoundError:
        return False
    return True


def load_zone(name: str) -> tzinfo:
    """The zone of a validated IANA name; ``TimeZoneNotFoundError`` naming the ``tzdata``
    extra when this machine has no tz database (the base install brings none)."""
    return _load_zone(name)
