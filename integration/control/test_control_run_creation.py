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
