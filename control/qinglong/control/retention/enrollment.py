"""Enrollment: the control rows retention claims walk (ADR-0379 §2; docs/protocols.md §4.3).

``enroll_run`` runs inside the terminal transition's own transaction, so a terminal run and
its controls commit together; ``eligible_at`` is ``finished_at`` (the later of run and
attempt) plus the task's log retention. ``enrollment_sweep`` is the bounded repair for rows
that were missed (a policy change, an older version's data).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from qinglong.control.db.engine import run_named
from qinglong.control.retention.claims import queries
from qinglong.shared.errors import ValidationError
from qinglong.shared.ids import validate_uuid7

if TYPE_CHECKING:
    from sqlalchemy import Connection

MAX_SWEEP_LIMIT = 1000


def enroll_run(conn: Connection, run_id: str) -> int:
    """Insert controls for every eligible attempt log of ``run_id`` (a UUIDv7); returns rows
    inserted.

    ``conn`` is an SQLAlchemy Connection inside the caller's open transaction (the terminal
    transition, ``with engine.begin() as conn``): it opens and commits none itself, so the
    terminal run and its controls commit together. Raises ValidationError when no
    transaction is open or ``run_id`` is malformed. Idempotent (``ON CONFLICT DO NOTHING``);
    a tombstoned attempt is skipped. # ADR-0379 §2
    """
    if not conn.in_transaction():
        raise ValidationError("conn", "enroll_run needs the terminal transition's transaction")
    return run_named(conn, queries()["enroll_run"], {"run_id": validate_uuid7(run_id)}).rowcount


def enrollment_sweep(conn: Connection, *, limit: int = 500) -> int:
    """Enroll at most ``limit`` (1..1000) missed candidates in one short transaction that it
    opens and commits on ``conn`` (an idle SQLAlchemy Connection).

    Returns rows inserted; 0 means nothing was missing. ValidationError on a bad limit.
    """
    if not 1 <= limit <= MAX_SWEEP_LIMIT:
        raise ValidationError("limit", f"{limit} outside 1..{MAX_SWEEP_LIMIT}")
    with conn.begin():
        return run_named(conn, queries()["enroll_sweep"], {"limit": limit}).rowcount
