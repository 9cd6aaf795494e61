"""The leaderless scheduler and its occurrence ledger (docs/protocols.md §4.2), against real
PostgreSQL, every replica acting as the runtime role (the grants suffice)."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

pytest.importorskip("sqlalchemy")

from pg_control_db import PgDb
from sched_support import ledger, runtime_engine, seed_task, wait_until_due

from qinglong.control.scheduling.next_fire import reschedule
from qinglong.control.scheduling.run_creation import queries
from qinglong.control.scheduling.scheduler import Config, Scheduler, TickResult
from qinglong.control.serve.lifecycle import PeriodicService

pytestmark = pytest.mark.timeout(180)
SECOND = timedelta(seconds=1)


@pytest.fixture
def replicas(pg_db: PgDb, request: pytest.FixtureRequest) -> Iterator[list[Scheduler]]:
    """Three schedulers, each with its own engine (a replica each); the config a test gives
    by indirect parametrization, else the defaults with a short tick."""
    config = getattr(request, "param", None) or Config(tick_period_s=0.1)
    engines = [runtime_engine(pg_db, pool_size=2) for _ in range(3)]
    schedulers = [Scheduler(e, config) for e in engines]
    yield schedulers
    for e in engines:
        e.dispose()


def tick_all(schedulers: list[Scheduler]) -> list[TickResult]:
    """Every replica ticks at the same moment (a barrier), in its own thread."""
    barrier = threading.Barrier(len(schedulers))
    results: list[TickResult] = []
    lock = threading.Lock()

    def tick(s: Scheduler) -> None:
        barrier.wait()
        result = s.run_once()
        with lock:
            results.append(result)

    threads = [threading.Thread(target=tick, args=(s,)) for s in schedulers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(results) == len(schedulers)
    return results


def every_second_task(pg_db: PgDb, scheduler: Scheduler, policy: str) -> str:
    with pg_db.connect() as admin:
        task_id = seed_task(admin, schedule="* * * * * *", policy=policy)
    with scheduler._engine.begin() as conn:  # the API's call on create
        assert reschedule(conn, task_id) is not None
    return task_id


def round_of(pg_db: PgDb, schedulers: list[Scheduler], task_id: str) -> Counter[str]:
    """Wait for the task's next slot, tick every replica at once; outcome counts summed."""
    with pg_db.connect() as admin:
        wait_until_due(admin, task_id)
    total: Counter[str] = Counter()
    for r in tick_all(schedulers):
        total.update(r.outcomes)
    return total


def finish_runs(pg_db: PgDb, task_id: str) -> None:
    with pg_db.connect() as admin:
        admin.execute("UPDATE runs SET status = 'succeeded', finished_at = now()"
                      " WHERE task_id = %s AND status = 'queued'", (task_id,))


def test_three_replicas_fire_each_second_once_and_the_ledger_holds_each_slot_once(
        pg_db: PgDb) -> None:
    config = Config(tick_period_s=0.1, backlog_limit=100_000)
    engines = [runtime_engine(pg_db, pool_size=2) for _ in range(3)]
    replicas = [Scheduler(e, config) for e in engines]
    services = [loop_of(s) for s in replicas]
    task_id = every_second_task(pg_db, replicas[0], "allow")
    with pg_db.connect() as admin:
        first = admin.execute("SELECT next_fire_at FROM tasks WHERE id = %s",
                              (task_id,)).fetchone()[0]
    try:
        for service in services:
            service.start()
        threading.Event().wait(10)
    finally:
        assert all(service.stop() for service in services)
        for e in engines:
            e.dispose()
    with pg_db.connect() as admin:
        end = admin.execute("SELECT next_fire_at FROM tasks WHERE id = %s",
                            (task_id,)).fetchone()[0]
        runs = admin.execute("SELECT scheduled_for, number FROM runs WHERE task_id = %s"
                             " ORDER BY number", (task_id,)).fetchall()
        rows = ledger(admin, task_id)
    expected = [first + i * SECOND for i in range(int((end - first) / SECOND))]
    assert len(expected) >= 8
    covered: Counter[Any] = Counter()
    for outcome, lo, hi, count, _run in rows:
        span = [lo + i * SECOND for i in range(int((hi - lo) / SECOND) + 1)]
        assert count == len(span), (outcome, lo, hi, count)
        covered.update(span)
    assert sorted(covered) == expected  # every slot once, none twice, none outside
    assert [slot for slot, _ in runs] == expected  # one run per slot, each slot fired
    assert [n for _, n in runs] == list(range(1, len(expected) + 1))
    created = {r[1]: r[4] for r in rows if r[0] == "run_created"}
    assert sorted(created) == expected and len(set(created.values())) == len(expected)
    assert not any(s.last_errors for s in replicas)
    assert all(service.health().failures == 0 for service in services)


def test_forbid_skips_while_a_run_is_active_and_merges_consecutive_skips(
        pg_db: PgDb, replicas: list[Scheduler]) -> None:
    task_id = every_second_task(pg_db, replicas[0], "forbid")
    assert round_of(pg_db, replicas, task_id)["run_created"] == 1
    for _ in range(3):  # the queued run is active: each slot is skipped, once
        assert round_of(pg_db, replicas, task_id) == Counter(skipped_active=1)
    finish_runs(pg_db, task_id)
    assert round_of(pg_db, replicas, task_id)["run_created"] == 1
    with pg_db.connect() as admin:
        rows = ledger(admin, task_id)
        runs = admin.execute("SELECT count(*) FROM runs WHERE task_id = %s",
                             (task_id,)).fetchone()[0]
    assert [(r[0], r[3]) for r in rows] == [
        ("run_created", 1), ("skipped_active", 3), ("run_created", 1)]
    skip = rows[1]
    assert (skip[1], skip[2]) == (rows[0][1] + SECOND, rows[0][1] + 3 * SECOND)
    assert runs == 2


@pytest.mark.parametrize("replicas", [Config(tick_period_s=0.1, backlog_limit=2)],
                         indirect=True, ids=["backlog2"])
def test_allow_queues_up_to_the_backlog_bound_then_records_backlog_full(
        pg_db: PgDb, replicas: list[Scheduler]) -> None:
    task_id = every_second_task(pg_db, replicas[0], "allow")
    outcomes = [round_of(pg_db, replicas, task_id) for _ in range(4)]
    assert outcomes == [Counter(run_created=1)] * 2 + [Counter(backlog_full=1)] * 2
    finish_runs(pg_db, task_id)
    assert round_of(pg_db, replicas, task_id) == Counter(run_created=1)
    with pg_db.connect() as admin:
        rows = ledger(admin, task_id)
    assert [(r[0], r[3]) for r in rows] == [
        ("run_created", 1), ("run_created", 1), ("backlog_full", 2), ("run_created", 1)]


def test_replace_creates_the_new_run_and_asks_the_active_one_to_stop_once(
        pg_db: PgDb, replicas: list[Scheduler]) -> None:
    task_id = every_second_task(pg_db, replicas[0], "replace")
    assert round_of(pg_db, replicas, task_id) == Counter(run_created=1)
    with pg_db.connect() as admin:
        admin.execute("UPDATE runs SET status = 'running' WHERE task_id = %s", (task_id,))
    assert round_of(pg_db, replicas, task_id) == Counter(run_created=1)
    with pg_db.connect() as admin:
        runs = admin.execute(
            "SELECT number, status, cancel_requested_at IS NOT NULL FROM runs"
            " WHERE task_id = %s ORDER BY number", (task_id,)).fetchall()
        events = admin.execute(
            "SELECT r.number, e.from_status, e.to_status, e.detail->>'reason' FROM events e"
            " JOIN runs r ON r.id = e.run_id WHERE r.task_id = %s AND e.kind ="
            " 'cancel_requested'", (task_id,)).fetchall()
    assert runs == [(1, "running", True), (2, "queued", False)]
    assert events == [(1, "running", "running", "replaced")]


def test_downtime_beyond_the_grace_is_one_compact_row_and_the_latest_slot_runs(
        pg_db: PgDb, replicas: list[Scheduler]) -> None:
    with pg_db.connect() as admin:
        task_id = seed_task(admin, schedule="* * * * *", policy="forbid", grace_s=120,
                            next_fire_sql="date_trunc('minute', now()) - interval '10 min'")
        missed_from = admin.execute("SELECT next_fire_at FROM tasks WHERE id = %s",
                                    (task_id,)).fetchone()[0]
    total: Counter[str] = Counter()
    for r in tick_all(replicas):
        total.update(r.outcomes)
    with pg_db.connect() as admin:
        rows = ledger(admin, task_id)
        fired = admin.execute("SELECT scheduled_for FROM runs WHERE task_id = %s",
                              (task_id,)).fetchall()
        due_again = admin.execute("SELECT next_fire_at > now() FROM tasks WHERE id = %s",
                                  (task_id,)).fetchone()[0]
    assert len(fired) == 1 and due_again
    latest = fired[0][0]
    missed = int((latest - missed_from) / timedelta(minutes=1))
    assert missed in (10, 11)  # a minute may turn between the seed and the tick
    assert [(r[0], r[1], r[2], r[3]) for r in rows] == [
        ("skipped_downtime", missed_from, latest - timedelta(minutes=1), missed),
        ("run_created", latest, latest, 1)]
    assert total == Counter(skipped_downtime=missed, run_created=1)


@pytest.mark.parametrize("replicas", [Config(tick_period_s=0.1, slot_scan_limit=7)],
                         indirect=True, ids=["scan7"])
def test_a_downtime_longer_than_one_tick_counts_is_recorded_in_parts_into_one_row(
        pg_db: PgDb, replicas: list[Scheduler]) -> None:
    with pg_db.connect() as admin:
        task_id = seed_task(admin, schedule="* * * * * *", grace_s=5,
                            next_fire_sql="date_trunc('second', now()) - interval '40 s'")
        missed_from = admin.execute("SELECT next_fire_at FROM tasks WHERE id = %s",
                                    (task_id,)).fetchone()[0]
    rounds = handled = 0
    while True:
        rounds += 1
        results = tick_all(replicas)
        handled += sum(r.tasks for r in results)  # replicas may take turns within a round
        if sum(r["run_created"] for r in results):
            break
        assert rounds < 20
    with pg_db.connect() as admin:
        rows = ledger(admin, task_id)
    assert handled >= 6  # 40+ downtime slots, 7 per tick; the last part also fires
    assert [r[0] for r in rows] == ["skipped_downtime", "run_created"]
    skip, run = rows
    assert skip[1] == missed_from and skip[2] == run[1] - SECOND
    assert skip[3] == int((run[1] - missed_from) / SECOND)


def test_an_idle_tick_over_10000_tasks_not_due_reads_no_task_row(
        pg_db: PgDb, replicas: list[Scheduler]) -> None:
    with pg_db.connect() as admin:
        admin.execute(
            "INSERT INTO tasks (id, project_id, name, log_retention_s, argv, schedule,"
            " next_fire_at) SELECT gen_random_uuid(), gen_random_uuid(), 'idle-' || g, 0,"
            " '[\"true\"]', '* * * * *', now() + interval '1 hour' + g * interval '1 s'"
            " FROM generate_series(1, 10000) AS g")
        admin.execute("ANALYZE tasks")
    with replicas[0]._engine.begin() as conn:
        plan = conn.exec_driver_sql("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "
                                    + queries()["due_tasks"], {"limit": 256}).scalar()
    nodes = list(_plan_nodes(plan[0]["Plan"]))
    scans = [n for n in nodes if "Scan" in n["Node Type"]]
    assert [(n["Node Type"], n.get("Index Name"), n["Actual Rows"]) for n in scans] == [
        ("Index Scan", "tasks_next_fire_idx", 0)]
    assert scans[0]["Shared Hit Blocks"] + scans[0].get("Shared Read Blocks", 0) <= 3
    assert replicas[0].run_once() == TickResult(0, 0, False, {})
    with pg_db.connect() as admin:
        seed_task(admin, schedule="* * * * *", next_fire_sql="now() - interval '1 s'")
    assert replicas[1].run_once().tasks == 1


def _plan_nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", []):
        yield from _plan_nodes(child)


def test_the_replica_s_loop_fires_a_due_task_once_and_stops(pg_db: PgDb) -> None:
    """The scheduler ticks in the replica's one loop (``PeriodicService``, as serve runs it):
    a due task's slot gets one run however many ticks pass."""
    engine = runtime_engine(pg_db, pool_size=1)
    seen: list[TickResult] = []
    scheduler = Scheduler(engine, Config(tick_period_s=0.05))

    def tick() -> TickResult:
        result = scheduler.run_once()
        seen.append(result)
        return result

    service = PeriodicService("scheduler", tick, period_s=0.05,
                              more=lambda r: bool(r.page_full))
    try:
        with pg_db.connect() as admin:
            seed_task(admin, schedule="* * * * *", next_fire_sql="date_trunc('minute', now())")
        service.start()
        assert wait_for_ticks(service, 3)
        assert service.stop() is True
        assert len(seen) >= 3
        assert sum(r["run_created"] for r in seen) == 1
        assert service.health().failures == 0
    finally:
        service.stop()
        engine.dispose()


def wait_for_ticks(service: PeriodicService, n: int) -> bool:
    """True once ``service`` has ticked ``n`` times (within 30 s)."""
    for _ in range(n):
        if not service.ticked.wait(30):
            return False
        service.ticked.clear()
    return True


def loop_of(scheduler: Scheduler) -> PeriodicService:
    """``scheduler`` in the loop serve runs it in (``serve/replica.py``)."""
    return PeriodicService("scheduler", scheduler.run_once,
                           period_s=scheduler.config.tick_period_s,
                           more=lambda r: bool(r.page_full))


def test_replace_ends_an_older_queued_run_cancelled_instead_of_leaving_it_claimable(
        pg_db: PgDb, replicas: list[Scheduler]) -> None:
    """Run 1 runs (its cancel requested by run 2's slot) so run 2 waits queued; run 3's slot
    must end run 2 at once: a queued run merely marked would still be claimed and started
    by the next worker (it hears the cancel only at its first heartbeat)."""
    task_id = every_second_task(pg_db, replicas[0], "replace")
    assert round_of(pg_db, replicas, task_id) == Counter(run_created=1)
    with pg_db.connect() as admin:
        admin.execute("UPDATE runs SET status = 'running' WHERE task_id = %s", (task_id,))
    assert round_of(pg_db, replicas, task_id) == Counter(run_created=1)
    assert round_of(pg_db, replicas, task_id) == Counter(run_created=1)
    with pg_db.connect() as admin:
        runs = admin.execute(
            "SELECT number, status, finished_at IS NOT NULL FROM runs"
            " WHERE task_id = %s ORDER BY number", (task_id,)).fetchall()
        events = admin.execute(
            "SELECT r.number, e.kind, e.from_status, e.to_status, e.detail->>'reason'"
            " FROM events e JOIN runs r ON r.id = e.run_id WHERE r.task_id = %s"
            " AND e.kind <> 'created' ORDER BY r.number, e.at", (task_id,)).fetchall()
    assert runs == [(1, "running", False), (2, "cancelled", True), (3, "queued", False)]
    assert events == [(1, "cancel_requested", "running", "running", "replaced"),
                      (2, "cancelled", "queued", "cancelled", "replaced")]
