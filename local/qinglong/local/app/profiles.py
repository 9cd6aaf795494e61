"""Profile-aware bounds (docs/protocols.md §3.5 table, §3.7; ADR-0069 §5)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Profile:
    """Bounds of one local profile.

    ``max_concurrent``: running attempts at once. ``grace_s``: TERM-to-KILL seconds.
    ``log_cap_bytes``: most output one attempt keeps (edge 16 MiB, standalone 256 MiB).
    ``cleanup_tick_s``/``cleanup_page``/``missing_receipt_retention_s``/``stop_wait_s``: the
    receipt cleanup lifecycle of ADR-0069 §5. ``log_retention_days``: default per task.
    ``history_retention_days``: terminal runs older than this are pruned (each task keeps its
    newest 20). ``retention_tick_s``/``retention_batch``: the retention lifecycle's period
    and its bound per tick (logs retired, runs pruned).
    """

    name: str
    max_concurrent: int
    grace_s: float
    cleanup_tick_s: int
    cleanup_page: int
    missing_receipt_retention_s: int
    stop_wait_s: float
    log_retention_days: int
    history_retention_days: int = 90
    retention_tick_s: int = 300
    retention_batch: int = 200
    log_cap_bytes: int = 256 * 1024 * 1024


EDGE = Profile("edge", 2, 5.0, 300, 8, 24 * 3600, 2.0, 7,
               history_retention_days=30, retention_tick_s=900, retention_batch=64,
               log_cap_bytes=16 * 1024 * 1024)
STANDALONE = Profile("standalone", 8, 5.0, 60, 32, 3600, 5.0, 30,
                     history_retention_days=90, retention_tick_s=300, retention_batch=200,
                     log_cap_bytes=256 * 1024 * 1024)
PROFILES = {p.name: p for p in (EDGE, STANDALONE)}


def get_profile(name: str) -> Profile:
    """The profile called ``name``. Raises ValueError for an unknown name."""
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError("profile must be edge or standalone") from None
