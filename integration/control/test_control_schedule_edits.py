"""What the API calls inside its transactions (docs/protocols.md §4.2): reschedule on create, edit,
enable, disable and removal; the disabled gap in the ledger on enable; a bounded prune.
Real PostgreSQL, as the runtime role."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest

pytest.importorskip("sqlalchemy")

from pg_control_db import PgDb
from sched_support import ledger, runtime_engine, seed_task
from sqlalchemy import Engine

from qinglong.control.scheduling.errors import TaskDeletedError
from qinglong.control.scheduling.ledger import prune_occurrences
from qinglong.control.scheduling.next_fire import on_enable, reschedule
from qinglong.shared.errors import ValidationError

pytestmark = pytest.mark.timeout(120)
MINUTE = timedelta(minutes=1)


@pytest.fixture
def engine(pg_db: PgDb) -> Iterator[Engine]:
    e = runtime_engine(pg_db)
    yield e
    e.dispose()


def version_and_next(pg_db: PgDb, task_id: str) -> tuple[int, object]:
    with pg_db.connect() as admin:
        row = admin.execute("SELECT schedule_version, next_fire_at FROM tasks WHERE id = %s",
                            (task_id,)).fetchone()
    return row[0], row[1]


def test_reschedule_sets_the_next_slot_after_now_and_null_without_a_schedule(
        pg_db: PgDb, engine: Engine) -> None:
    with pg_db.connect() as admin:
        every_minute = seed_task(admin, schedule="*/5 * * * *", timezone="Asia/Shanghai")
        once = seed_task(admin, schedule="@once")
        manual = seed_task(admin, schedule=None)
        now = admin.execute("SELECT now()").fetchone()[0]
    with engine.begin() as conn:
        nxt = reschedule(conn, every_minute)
        assert reschedule(conn, once) is None and reschedule(conn, manual) is None
    assert nxt is not None and now < nxt <= now + 5 * MINUTE and nxt.minute % 5 == 0
    assert version_and_next(pg_db, every_minute) == (1, nxt)
    assert version_and_next(pg_db, once) == (1, None)


def test_disable_and_removal_clear_the_next_fire_time(pg_db: PgDb, engine: Engine) -> None:
    with pg_db.connect() as admin:
        task_id = seed_task(admin, schedule="* * * * *")
    with engine.begin() as conn:
        assert reschedule(conn, task_id) is not None
    with pg_db.connect() as admin:
        admin.execute("UPDATE tasks SET enabled = false WHERE id = %s", (task_id,))
    with engine.begin() as conn:
        assert reschedule(conn, task_id) is None
    assert version_and_next(pg_db, task_id) == (2, None)
    with pg_db.connect() as admin:
        admin.execute("UPDATE tasks SET enabled = true, deleted_at = now() WHERE id = %s",
                      (task_id,))
    with engine.begin() as conn:
        assert reschedule(conn, task_id) is None
        with pytest.raises(TaskDeletedError):
            on_enable(conn, task_id, disabled_since=conn.exec_driver_sql(
                "SELECT now()").scalar_one())


def test_enable_records_the_slots_missed_while_disabled_as_one_row(
        pg_db: PgDb, engine: Engine) -> None:
    with pg_db.connect() as admin:
        task_id = seed_task(admin, schedule="* * * * *", enabled=True)
        disabled_since = admin.execute(
            "SELECT date_trunc('minute', now()) - interval '10 min' + interval '20 s'"
        ).fetchone()[0]
    with engine.begin() as conn:
        recorded = on_enable(conn, task_id, disabled_since=disabled_since)
    with pg_db.connect() as admin:
        rows = ledger(admin, task_id)
        nxt, now = admin.execute("SELECT next_fire_at, now() FROM tasks WHERE id = %s",
                                 (task_id,)).fetchone()
    first = disabled_since.replace(second=0)  # came due just before the disable, never ticked
    assert recorded in (11, 12)  # the minute may turn during the test
    assert rows == [("skipped_disabled", first, first + (recorded - 1) * MINUTE, recorded,
                     None)]
    assert now < nxt == first + recorded * MINUTE
    with engine.begin() as conn:  # enabling again at once finds nothing new to record
        assert on_enable(conn, task_id, disabled_since=disabled_since) in (0, 1)
    with pg_db.connect() as admin:
        assert len(ledger(admin, task_id)) == 1


def test_prune_deletes_old_ledger_rows_in_bounded_batches(pg_db: PgDb, engine: Engine) -> None:
    with pg_db.connect() as admin:
        task_id = seed_task(admin, schedule="* * * * *")
        for days in (30, 20, 10, 0):
            admin.execute(
                "INSERT INTO occurrences (id, task_id, outcome, first_slot, last_slot)"
                " VALUES (gen_random_uuid(), %s, 'skipped_active', now() - %s * interval"
                " '1 day', now() - %s * interval '1 day')", (task_id, days, days))
        cutoff = admin.execute("SELECT now() - interval '5 days'").fetchone()[0]
    with engine.begin() as conn:
        assert prune_occurrences(conn, older_than=cutoff, limit=2) == 2
    with engine.begin() as conn:
        assert prune_occurrences(conn, older_than=cutoff, limit=2) == 1
        assert prune_occurrences(conn, older_than=cutoff, limit=2) == 0
        with pytest.raises(ValidationError):
            prune_occurrences(conn, older_than=cutoff, limit=0)
    with pg_db.connect() as admin:
        assert len(ledger(admin, task_id)) == 1
