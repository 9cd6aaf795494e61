"""Claim-shaped statements do bounded work at 100,000 rows, with and without statistics.

Each statement runs under ``EXPLAIN (ANALYZE, BUFFERS)`` (``plan_work.explain_work``) on a
fresh database whose tables autovacuum never touches, at 1,000 and at 100,000 rows of every
kind, never analyzed (at 100,000 also as a prepared statement's generic plan); then once
more at 100,000 after ``ANALYZE``. The larger table may cost
at most twice the smaller, in rows read over all plan nodes and in shared buffers touched
(docs/protocols.md §4.3, ADR-0379 §4: a claim costs the same whatever the table holds).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from pg_control_db import PgDb, admin, drop_database, drop_role, unique
from plan_work import (
    INCARNATION,
    POOL,
    PROJECT,
    Work,
    explain_work,
    key,
    never_analyzed,
    outline,
    prepare,
    seed,
)

from qinglong.control.dispatch.recovery import BATCH_DEFAULT
from qinglong.control.dispatch.statements import sql as dispatch_sql
from qinglong.control.retention.claims import MAX_CLAIM_LIMIT
from qinglong.control.retention.claims import queries as retention_sql
from qinglong.control.scheduling.run_creation import queries as scheduling_sql
from qinglong.control.scheduling.scheduler import PAGE_SIZE_DEFAULT
from qinglong.shared.wire import MAX_CLAIM

pytestmark = [pytest.mark.integration, pytest.mark.postgres]

SMALL, LARGE = 1_000, 100_000
FACTOR = 2.0
FINALIZED = 500  # the control the finalize statements work on: held under a live lease
OWNER, TOKEN = "bench/" + "0" * 32, "00000000-0000-7000-8000-0000000000dd"
STATEMENTS = ("retention claim", "retention lock_control", "retention retire_control",
              "retention record_failure", "dispatch pick_runs", "scheduler due_tasks",
              "recovery expired_leases")


def _named(get: Callable[[str], str], name: str) -> tuple[str, str | None]:
    """Statement ``name`` and the plan pin the code runs before it in the same transaction
    (block ``<name>_plan``), if there is one."""
    try:
        pin: str | None = get(f"{name}_plan")
    except KeyError:
        pin = None
    return get(name), pin


def _statements() -> dict[str, tuple[str, str | None, dict[str, Any]]]:
    with admin() as conn:  # the seeded keys, as text (key() is SQL)
        row = conn.execute(f"SELECT {key(3, FINALIZED)}::text, {key(2, FINALIZED)}::text"
                           ).fetchone()
    assert row is not None
    attempt, run = row
    fence = {"attempt_id": attempt, "claim_version": 1}
    retention = retention_sql().__getitem__
    scheduling = scheduling_sql().__getitem__
    return {
        "retention claim": (*_named(retention, "claim"), {
            "limit": MAX_CLAIM_LIMIT, "owner": OWNER, "lease_s": 60.0,
            "versioned_only": False}),
        "retention lock_control": (*_named(retention, "lock_control"),
                                   {"attempt_id": attempt}),
        "retention retire_control": (*_named(retention, "retire_control"), {
            **fence, "project_id": PROJECT, "run_id": run, "artifact_id": f"wlog-{attempt}",
            "outcome": "deleted", "retired_at": "2026-01-01T00:00:00+00:00",
            "evidence": "{}", "evidence_sha256": "0" * 64}),
        "retention record_failure": (*_named(retention, "record_failure"), {
            **fence, "claim_token": TOKEN, "claim_owner": OWNER,
            "failure_class": "artifact_unavailable", "manual_after": 8, "delay_s": 60.0}),
        "dispatch pick_runs": (*_named(dispatch_sql, "pick_runs"), {
            "incarnation_id": INCARNATION, "pool_id": POOL, "limit": MAX_CLAIM}),
        "scheduler due_tasks": (*_named(scheduling, "due_tasks"),
                                {"limit": PAGE_SIZE_DEFAULT}),
        "recovery expired_leases": (*_named(dispatch_sql, "expired_leases"),
                                    {"limit": BATCH_DEFAULT}),
    }


def _measure_all(db: PgDb, *, generic: bool = False) -> dict[str, Work]:
    statements = _statements()
    assert tuple(statements) == STATEMENTS
    with db.connect() as conn:
        return {name: explain_work(conn, text, params, before=pin, generic=generic)
                for name, (text, pin, params) in statements.items()}


@pytest.fixture(scope="module")
def measured(pg_template: PgDb) -> Iterator[dict[str, dict[str, Work]]]:
    """Work per statement at ``small``, ``large`` (both never analyzed), ``large generic``
    (the same, as a prepared statement's generic plan) and ``analyzed`` (the large database
    after ANALYZE), on one database cloned from the template."""
    db = PgDb(unique("ql3t_work"), unique("ql3rt"))
    with admin() as conn:
        conn.execute(f'CREATE DATABASE "{db.name}" TEMPLATE "{pg_template.name}"')
    try:
        out: dict[str, dict[str, Work]] = {}
        with db.connect() as conn:
            prepare(conn)
            seed(conn, 0, SMALL)
            # the finalize statements' control, held under a live lease (version 1)
            conn.execute("UPDATE run_attempt_log_retention_controls SET claim_version = 1,"
                         " claim_owner = %s, claim_token = %s::uuid,"
                         " lease_expires_at = now() + interval '1 day'"
                         f" WHERE attempt_id = {key(3, FINALIZED)}",
                         (OWNER, TOKEN))
            assert never_analyzed(conn)
        out["small"] = _measure_all(db)
        with db.connect() as conn:
            seed(conn, SMALL, LARGE)
            assert never_analyzed(conn)
        out["large"] = _measure_all(db)
        out["large generic"] = _measure_all(db, generic=True)  # a prepared statement's plan
        with db.connect() as conn:
            assert never_analyzed(conn)  # nothing analyzed while measuring either
            conn.execute("ANALYZE")
        out["analyzed"] = _measure_all(db)
        yield out
    finally:
        drop_database(db.name)
        drop_role(db.runtime_role)


@pytest.mark.parametrize("statement", STATEMENTS)
@pytest.mark.parametrize("case", ["large", "large generic", "analyzed"])
def test_claim_work_does_not_grow_with_the_table(
        measured: dict[str, dict[str, Work]], statement: str, case: str) -> None:
    small, big = measured["small"][statement], measured[case][statement]
    print(f"{statement:26} {case:13} rows {small.rows:>7} -> {big.rows:>7}"
          f"  buffers {small.buffers:>6} -> {big.buffers:>6}")
    assert big.within(small, FACTOR), (
        f"{statement}: {case} {LARGE} rows read {big.rows} rows / {big.buffers} buffers,"
        f" {SMALL} rows read {small.rows} / {small.buffers}\n--- {case}:\n{outline(big.plan)}"
        f"\n--- small:\n{outline(small.plan)}")
