"""create_run (docs/protocols.md §4.2): numbers without gaps, one run per slot, no run for a removed
task. Runs as the runtime role, against real PostgreSQL."""

from __future__ import annotations

import threading
from datetime import UTC, datetime

import pytest

pytest.importorskip("sqlalchemy")

from pg_control_db import PgDb
from sched_support import runtime_engine, seed_task
from sqlalchemy import Engine

from qinglong.control.scheduling.errors import TaskDeletedError, TaskNotFoundError
from qinglong.control.scheduling.run_creation import CreatedRun, create_run
from qinglong.shared.ids import uuid7

pytestmark = pytest.mark.timeout(120)


def test_manual_runs_are_numbered_1_2_3_queued_with_a_created_event(pg_db: PgDb) -> None:
    with pg_db.connect() as admin:
        task_id = seed_task(admin)
        project_id = admin.execute("SELECT project_id FROM tasks WHERE id = %s",
                                   (task_id,)).fetchone()[0]
    engine = runtime_engine(pg_db)
    try:
        made = []
        for _ in range(3):
            with engine.begin() as conn:
                made.append(create_run(conn, task_id=task_id, trigger="manual"))
    finally:
        engine.dispose()
    assert [r.number for r in made if r] == [1, 2, 3]
    first = made[0]
    assert first is not None and first.scheduled_for is None
    assert first.project_id == str(project_id) and first.trigger == "manual"
    with pg_db.connect() as admin:
        rows = admin.execute(
            "SELECT r.status, r.owner, r.number, r.not_before <= now(), e.kind, e.from_status,"
            " e.to_status FROM runs r JOIN events e ON e.run_id = r.id WHERE r.task_id = %s"
            " ORDER BY r.number", (task_id,)).fetchall()
        counter = admin.execute("SELECT run_counter FROM tasks WHERE id = %s",
                                (task_id,)).fetchone()[0]
    assert rows == [("queued", "runtime", n, True, "created", None, "queued") for n in (1, 2, 3)]
    assert counter == 3


def test_concurrent_inserts_of_one_slot_make_one_run_and_take_no_spare_number(
        pg_db: PgDb) -> None:
    with pg_db.connect() as admin:
        task_id = seed_task(admin, schedule="* * * * *")
    engines = [runtime_engine(pg_db, pool_size=1) for _ in range(6)]
    slots = [datetime(2026, 1, 1, 0, m, tzinfo=UTC) for m in range(3)]
    results: dict[datetime, list[CreatedRun | None]] = {s: [] for s in slots}
    lock = threading.Lock()
    try:
        for slot in slots:
            barrier = threading.Barrier(len(engines))

            def insert(engine: Engine, slot: datetime, barrier: threading.Barrier) -> None:
                barrier.wait()
                with engine.begin() as conn:
                    made = create_run(conn, task_id=task_id, trigger="schedule",
                                      scheduled_for=slot)
                with lock:
                    results[slot].append(made)

            threads = [threading.Thread(target=insert, args=(e, slot, barrier)) for e in engines]
            for t in threads:
                t.start()
            for t in threads:
                t.join(30)
    finally:
        for e in engines:
            e.dispose()
    for slot in slots:
        won = [r for r in results[slot] if r is not None]
        assert len(results[slot]) == 6 and len(won) == 1, slot
        assert won[0].scheduled_for == slot
    numbers = [next(r for r in results[s] if r is not None).number for s in slots]
    assert numbers == [1, 2, 3]
    with pg_db.connect() as admin:
        counter = admin.execute("SELECT run_counter FROM tasks WHERE id = %s",
                                (task_id,)).fetchone()[0]
        runs = admin.execute("SELECT count(*) FROM runs WHERE task_id = %s",
                             (task_id,)).fetchone()[0]
    assert (counter, runs) == (3, 3)


def test_a_removed_task_gets_no_run_and_an_unknown_one_is_not_found(pg_db: PgDb) -> None:
    with pg_db.connect() as admin:
        task_id = seed_task(admin, deleted=True)
    engine = runtime_engine(pg_db)
    try:
        with pytest.raises(TaskDeletedError), engine.begin() as conn:
            create_run(conn, task_id=task_id, trigger="manual")
        with pytest.raises(TaskNotFoundError), engine.begin() as conn:
            create_run(conn, task_id=uuid7(), trigger="manual")
    finally:
        engine.dispose()
    with pg_db.connect() as admin:
        assert admin.execute("SELECT count(*) FROM runs").fetchone()[0] == 0


def test_run_now_from_8_concurrent_clients_numbers_gapless_even_when_some_roll_back(
        pg_db: PgDb) -> None:
    """Run now of an ``allow`` task takes its number in its last statement (firing.run_now):
    8 clients at once, every third transaction of each rolled back after its run was made,
    leave numbers 1..N with no gap and the counter at N."""
    from qinglong.control.scheduling.firing import run_now

    with pg_db.connect() as admin:
        task_id = seed_task(admin, policy="allow")
    engines = [runtime_engine(pg_db, pool_size=1) for _ in range(8)]
    barrier = threading.Barrier(len(engines))
    kept: list[int] = []
    rolled_back = 0
    lock = threading.Lock()

    class RollbackError(Exception):
        pass

    def client(engine: Engine) -> None:
        nonlocal rolled_back
        barrier.wait()
        for i in range(15):
            try:
                with engine.begin() as conn:
                    made = run_now(conn, task_id, policy="allow")
                    if i % 3 == 2:
                        raise RollbackError
            except RollbackError:
                with lock:
                    rolled_back += 1
                continue
            with lock:
                kept.append(made.number)

    try:
        threads = [threading.Thread(target=client, args=(e,)) for e in engines]
        for t in threads:
            t.start()
        for t in threads:
            t.join(90)
    finally:
        for e in engines:
            e.dispose()
    assert rolled_back == 8 * 5
    assert sorted(kept) == list(range(1, 8 * 10 + 1))
    with pg_db.connect() as admin:
        counter = admin.execute("SELECT run_counter FROM tasks WHERE id = %s",
                                (task_id,)).fetchone()[0]
        numbers = [r[0] for r in admin.execute(
            "SELECT number FROM runs WHERE task_id = %s ORDER BY number", (task_id,))]
        created = admin.execute(
            "SELECT count(*) FROM events e JOIN runs r ON r.id = e.run_id"
            " WHERE r.task_id = %s AND e.kind = 'created'", (task_id,)).fetchone()[0]
    assert (counter, numbers, created) == (80, list(range(1, 81)), 80)


def test_run_now_read_as_allow_decides_again_when_the_task_changed_meanwhile(
        pg_db: PgDb) -> None:
    """The caller read ``allow`` without a lock; the task is now ``forbid`` with a run
    queued, or removed: the policy under the lock wins (refused / not found), nothing made."""
    from qinglong.control.scheduling.errors import RunRefusedError
    from qinglong.control.scheduling.firing import run_now

    with pg_db.connect() as admin:
        forbid = seed_task(admin, policy="forbid")
        removed = seed_task(admin, policy="allow", deleted=True)
    engine = runtime_engine(pg_db)
    try:
        with engine.begin() as conn:
            first = run_now(conn, forbid, policy="allow")
        with pytest.raises(RunRefusedError), engine.begin() as conn:
            run_now(conn, forbid, policy="allow")
        with pytest.raises(TaskDeletedError), engine.begin() as conn:
            run_now(conn, removed, policy="allow")
    finally:
        engine.dispose()
    assert first.number == 1
    with pg_db.connect() as admin:
        rows = admin.execute("SELECT task_id, number FROM runs").fetchall()
        counters = dict(admin.execute("SELECT id, run_counter FROM tasks").fetchall())
    assert [(str(t), n) for t, n in rows] == [(forbid, 1)]
    assert {str(k): v for k, v in counters.items()} == {forbid: 1, removed: 0}


def test_request_keys_older_than_24_hours_are_pruned_and_younger_ones_kept(
        pg_db: PgDb) -> None:
    from qinglong.control.scheduling.run_creation import claim_request_key, prune_request_keys

    with pg_db.connect() as admin:
        task_id = seed_task(admin, policy="allow")
    engine = runtime_engine(pg_db)
    try:
        with engine.begin() as conn:
            for key in ("old-1", "old-2", "old-3", "young"):
                assert claim_request_key(conn, task_id=task_id, key=key, run_id=uuid7())
        with pg_db.connect() as admin:
            admin.execute("UPDATE run_request_keys SET created_at = now() - interval '25 hours'"
                          " WHERE key LIKE 'old-%%'")
        with engine.begin() as conn:
            first = prune_request_keys(conn, limit=2)
        with engine.begin() as conn:
            second = prune_request_keys(conn, limit=2)
        with engine.begin() as conn:
            third = prune_request_keys(conn, limit=2)
    finally:
        engine.dispose()
    assert (first, second, third) == (2, 1, 0)
    with pg_db.connect() as admin:
        left = [r[0] for r in admin.execute("SELECT key FROM run_request_keys")]
    assert left == ["young"]
