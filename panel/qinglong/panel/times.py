"""Instants as the panel shows them (docs/panel.md "Times"): ``<time data-local
datetime="ISO">`` whose text is the instant in UTC with its offset, turned into the viewer's
own zone by ``static/localtime.js`` (loaded on every page; without script the UTC text
stays, still readable and never a raw ISO string)."""

from __future__ import annotations

import datetime as dt

from markupsafe import Markup, escape


def when(value: object) -> Markup | str:
    """A Jinja filter: an ISO 8601 instant (``2026-12-03T00:00:00.000Z``, ``…+08:00``) or a
    ``datetime`` as ``<time data-local datetime="…">2026-12-03 00:00:00 +00:00</time>``
    (seconds, no fraction); None or "" as ""; anything that is not an instant is shown
    escaped as it is (never an error on a page)."""
    if value is None or value == "":
        return ""
    if isinstance(value, dt.datetime):
        at = value
    else:
        try:
            at = dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
        except ValueError:
            return str(value)
    if at.tzinfo is None:
        at = at.replace(tzinfo=dt.UTC)
    utc = at.astimezone(dt.UTC)
    iso = utc.isoformat().replace("+00:00", "Z")
    text = utc.strftime("%Y-%m-%d %H:%M:%S +00:00")
    return Markup('<time data-local datetime="{}">{}</time>').format(escape(iso), text)
