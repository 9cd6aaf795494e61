"""Text for people of ``ql3 local`` (issue 12 items 3 and 4): the ``--utc`` and ``--wide``
options and ``serve``'s log lines. The pure formatting — times with offsets, durations,
commands, tables that fit ``COLUMNS``/80 — lives in ``qinglong.shared.display``, shared with
``ql3 cluster``, and is re-exported here under the names the local commands have always used.

``--json`` never goes through here: it keeps ISO-8601 UTC.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar

import click

from qinglong.shared.display import (
    DEFAULT_WIDTH,
    DISPLAY,
    ELLIPSIS,
    GAP,
    MIN_FLEX_WIDTH,
    Display,
    command,
    duration,
    fit_table,
    offset_text,
    short_id,
    shorten,
    span,
    terminal_width,
    value,
    when,
)

__all__ = [
    "DEFAULT_WIDTH", "DISPLAY", "ELLIPSIS", "GAP", "MIN_FLEX_WIDTH", "Display",
    "LocalTimeFormatter", "command", "configure_logging", "display_options", "duration",
    "fit_table", "offset_text", "short_id", "shorten", "span", "terminal_width",
    "utc_option", "value", "when", "wide_option",
]

_F = TypeVar("_F", bound=Callable[..., Any])


def _set_utc(_ctx: click.Context, _param: click.Parameter, value: bool) -> bool:
    DISPLAY.utc = value
    return value


def _set_wide(_ctx: click.Context, _param: click.Parameter, value: bool) -> bool:
    DISPLAY.wide = value
    return value


utc_option = click.option(
    "--utc", is_flag=True, expose_value=False, callback=_set_utc,
    help="Print times in UTC (default: your local zone, with its offset).",
)
wide_option = click.option(
    "--wide", is_flag=True, expose_value=False, callback=_set_wide,
    help="Show full ids and commands and every column, however wide.",
)


def display_options(func: _F) -> _F:
    """Add ``--utc`` and ``--wide`` to a command (they set :data:`DISPLAY`)."""
    return utc_option(wide_option(func))


class LocalTimeFormatter(logging.Formatter):
    """Log lines stamped like everything else we print (:func:`when`)."""

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802
        return when(record.created)


def configure_logging() -> None:
    """``serve``'s own log lines: ``2026-12-01 09:09:01 +08:00 ql3 INFO message``."""
    handler = logging.StreamHandler()
    handler.setFormatter(LocalTimeFormatter("%(asctime)s ql3 %(levelname)s %(message)s"))
    logging.basicConfig(level=logging.INFO, handlers=[handler])
