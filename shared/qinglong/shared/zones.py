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
"""

from __future__ import annotations

import difflib
import functools
import os
import zoneinfo

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
    close = difflib.get_close_matches(key, list(by_lower), n=1, cutoff=0.8)
    return by_lower[close[0]] if close else None
