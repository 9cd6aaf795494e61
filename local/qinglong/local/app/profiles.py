"""Profile-aware bounds (DESIGN.md §3.5 table, §3.7; ADR-0069 §5)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Profile:
    """Bounds of one local profile.

    ``max_concurrent``: running attempts at once. ``grace_s``: TERM-to-KILL seconds.
    ``cleanup_tick_s``/``cleanup_page``/``missing_receipt_retention_s``/``stop_wait_s``: the
    receipt cleanup lifecycle of ADR-0069 §5. ``log_retention_days``: default per task.
    """

    name: str
    max_concurrent: int
    grace_s: float
    cleanup_tick_s: int
    cleanup_page: int
    missing_receipt_retention_s: int
    stop_wait_s: float
    log_retention_days: int


EDGE = Profile("edge", 2, 5.0, 300, 8, 24 * 3600, 2.0, 7)
STANDALONE = Profile("standalone", 8, 5.0, 60, 32, 3600, 5.0, 30)
PROFILES = {p.name: p for p in (EDGE, STANDALONE)}


def get_profile(name: str) -> Profile:
    """The profile called ``name``. Raises ValueError for an unknown name."""
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError("profile must be edge or standalone") from None
