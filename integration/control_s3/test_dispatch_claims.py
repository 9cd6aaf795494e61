"""Claims and lease writes against real PostgreSQL as the runtime role (docs/protocols.md §4.2;
issue 11 items 3 and 5; cases C12, C21)."""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from dispatch_world import World, registration, runtime_engine
from pg_control_db import PgDb

from qinglong.control.dispatch.claims import claim_attempts
from qinglong.control.dispatch.completion import complete_attempt
from qinglong.control.dispatch.config import DispatchConfig
from qinglong.control.dispatch.errors import (
    CompletionConflictError,
    LabelsOutsidePoolError,
    LeaseLostError,
)
from qinglong.control.dispatch.leases import heartbeat, report_started
from qinglong.control.dispatch.recovery import LeaseRecovery, RecoveryConfig
from qinglong.control.dispatch.workers import register_incarnation
from qinglong.control.serve.lifecycle import PeriodicService
from qinglong.shared.wire import ClaimRequest, CompletionReport, HeartbeatReport, StartedReport

pytestmark = [pytest.mark.integration, pytest.mark.postgres]
CONFIG = DispatchConfig(lease_ms=30_000, heartbeat_ms=10_000)


@pytest.fixture
def world(pg_db: PgDb) -> World:
    return World(pg_db)


@pytest.fixture
def engine(pg_db: PgDb) -> Iterator[Any]:
    eng = runtime_engine(pg_db)
    try:
        yield eng
    finally:
        eng.dispose()


def _worker(engine: Any, pool: str, name: str = "w1",
            labels: dict[str, str] | None = None, pool_labels: dict[str, str] | None = None
            ) -> str:
    return register_incarnation(engine, CONFIG, pool_id=pool, pool_labels=pool_labels or {},
                                registration=registration(name, labels)).incarnation_id


def _claim(engine: Any, pool: str, inc: str, n: int = 64, config: DispatchConfig = CONFIG
           ) -> list[Any]:
    return claim_attempts(engine, config, pool_id=pool,
                          request=ClaimRequest(inc, n)).attempts


def _done(lease: Any, outcome: str = "succeeded", exit_code: int | None = 0
          ) -> CompletionReport:
    return CompletionReport(lease=lease, outcome=outcome, exit_code=exit_code, signal=None,
                            log=None)


def test_concurrent_claimers_never_claim_one_run_twice(world: World, engine: Any) -> None:
    pool = world.pool()
    world.runs(world.task(), 60)
    incs = [_worker(engine, pool, f"w{i}") for i in range(4)]
    got: list[list[Any]] = [[] for _ in incs]
    start = threading.Barrier(len(incs))

    def claimer(i: int) -> None:
        start.wait()
        while batch := _claim(engine, pool, incs[i], 3):
            got[i].extend(batch)

    threads = [threading.Thread(target=claimer, args=(i,)) for i in range(len(incs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    run_ids = [a.run_id for batch in got for a in batch]
    assert len(run_ids) == 60 and len(set(run_ids)) == 60
    assert sum(1 for batch in got if batch) >= 2  # the claimers really ran side by side
    assert world.one("SELECT count(*) FROM attempts") == 60
    assert world.one("SELECT count(*) FROM runs WHERE status = 'dispatching'") == 60


def test_a_claim_carries_the_lease_timing_and_the_flattened_env(world: World, engine: Any
                                                                ) -> None:
    pool = world.pool()
    [run_id] = world.runs(world.task())
    [attempt] = _claim(engine, pool, _worker(engine, pool))
    assert attempt.run_id == run_id and attempt.attempt_number == 1
    assert attempt.lease.lease_version == 1
    assert attempt.env == {"A": "1", "TOKEN": "s3cret"}
    assert (attempt.lease_ms, attempt.heartbeat_ms, attempt.timeout_ms) == (30_000, 10_000,
                                                                           30_000)
    type(attempt).from_json(attempt.to_json())  # valid on the wire as the worker reads it
    left = world.one("SELECT extract(epoch FROM lease_expires_at - now()) FROM attempts")
    assert 25 < float(left) <= 30


def test_labels_bound_registration_and_claims(world: World, engine: Any) -> None:
    pool = world.pool({"gpu": "yes", "zone": "a"})
    with pytest.raises(LabelsOutsidePoolError):
        _worker(engine, pool, labels={"gpu": "no"}, pool_labels={"gpu": "yes", "zone": "a"})
    [gpu_run] = world.runs(world.task(labels={"gpu": "yes"}))
    [any_run] = world.runs(world.task())
    plain = _worker(engine, pool, "plain", labels={}, pool_labels={"gpu": "yes"})
    assert [a.run_id for a in _claim(engine, pool, plain)] == [any_run]
    gpu = _worker(engine, pool, "gpu", labels={"gpu": "yes"}, pool_labels={"gpu": "yes"})
    assert [a.run_id for a in _claim(engine, pool, gpu)] == [gpu_run]


def test_replace_policy_leases_one_run_of_a_task_at_a_time(world: World, engine: Any
                                                           ) -> None:
    pool = world.pool()
    task = world.task(policy="replace")
    world.runs(task, 3)
    inc = _worker(engine, pool)
    first = _claim(engine, pool, inc)
    assert len(first) == 1
    assert _claim(engine, pool, inc) == []  # one is dispatching: the others wait
    complete_attempt(engine, s3=None, bucket=None, pool_id=pool, report=_done(first[0].lease))
    assert len(_claim(engine, pool, inc)) == 1


def test_started_replay_answers_replayed_and_heartbeat_carries_cancel(
        world: World, engine: Any) -> None:
    pool = world.pool()
    [run_id] = world.runs(world.task())
    [attempt] = _claim(engine, pool, _worker(engine, pool))
    report = StartedReport(attempt.lease, pid=1234)
    assert report_started(engine, CONFIG, pool_id=pool, report=report).replayed is False
    assert report_started(engine, CONFIG, pool_id=pool, report=report).replayed is True
    assert world.run_status(run_id) == "running"
    assert world.one("SELECT count(*) FROM events WHERE kind = 'attempt_running'") == 1
    beat = HeartbeatReport(attempt.lease)
    world.sql("UPDATE attempts SET lease_expires_at = now() + interval '1 s'")
    assert heartbeat(engine, CONFIG, pool_id=pool, report=beat).cancel is False
    left = world.one("SELECT extract(epoch FROM lease_expires_at - now()) FROM attempts")
    assert float(left) > 25  # renewed from the database's now by the full lease
    world.sql("UPDATE runs SET cancel_requested_at = now()")
    assert heartbeat(engine, CONFIG, pool_id=pool, report=beat).cancel is True
    other_pool = world.pool()
    with pytest.raises(LeaseLostError):  # another pool's token never reaches this lease
        heartbeat(engine, CONFIG, pool_id=other_pool, report=beat)


def test_c21_stale_completion_after_recovery_and_reclaim_is_refused(
        world: World, engine: Any) -> None:
    pool = world.pool()
    [run_id] = world.runs(world.task(max_attempts=2))
    old, new = _worker(engine, pool, "w"), _worker(engine, pool, "w")  # same name: restart
    [stale] = _claim(engine, pool, old)
    report_started(engine, CONFIG, pool_id=pool, report=StartedReport(stale.lease, 1))
    world.expire(stale.lease.attempt_id)
    assert LeaseRecovery(engine).run_once().requeued == 1
    [fresh] = _claim(engine, pool, new)
    assert fresh.run_id == run_id and fresh.attempt_number == 2
    assert complete_attempt(engine, s3=None, bucket=None, pool_id=pool,
                            report=_done(fresh.lease)).replayed is False
    with pytest.raises(LeaseLostError):
        complete_attempt(engine, s3=None, bucket=None, pool_id=pool,
                         report=_done(stale.lease, "failed", 1))
    assert world.attempt(stale.lease.attempt_id)[:2] == ("lost", "lost")
    assert world.attempt(fresh.lease.attempt_id)[0] == "succeeded"
    assert world.run_status(run_id) == "succeeded"


def test_a_replayed_completion_answers_as_the_first_and_other_content_is_refused(
        world: World, engine: Any) -> None:
    pool = world.pool()
    [run_id] = world.runs(world.task())
    [attempt] = _claim(engine, pool, _worker(engine, pool))
    report = _done(attempt.lease, "failed", 3)
    assert complete_attempt(engine, s3=None, bucket=None, pool_id=pool,
                            report=report).replayed is False
    # the first response was lost: the worker sends the same completion again
    assert complete_attempt(engine, s3=None, bucket=None, pool_id=pool,
                            report=report).replayed is True
    with pytest.raises(CompletionConflictError):
        complete_attempt(engine, s3=None, bucket=None, pool_id=pool, report=_done(attempt.lease))
    assert world.attempt(attempt.lease.attempt_id)[0] == "failed"
    assert world.run_status(run_id) == "failed"
    assert world.one("SELECT count(*) FROM events WHERE kind = 'attempt_completed'") == 1


@pytest.mark.parametrize(("started", "outcome"), [(False, "failed"), (True, "succeeded")])
def test_the_attempt_completed_event_reads_from_the_status_before_completion(
        world: World, engine: Any, started: bool, outcome: str) -> None:
    """``attempt_completed`` goes from the attempt's status before the completion (claimed,
    or running once started) to the outcome — never ``failed`` to ``failed``."""
    pool = world.pool()
    world.runs(world.task())
    [attempt] = _claim(engine, pool, _worker(engine, pool))
    if started:
        report_started(engine, CONFIG, pool_id=pool, report=StartedReport(attempt.lease, 1))
    before = world.attempt(attempt.lease.attempt_id)[0]
    assert before == ("running" if started else "claimed")
    complete_attempt(engine, s3=None, bucket=None, pool_id=pool,
                     report=_done(attempt.lease, outcome, 0 if outcome == "succeeded" else 1))
    assert world.one("SELECT from_status || ' -> ' || to_status FROM events"
                     " WHERE attempt_id = %s AND kind = 'attempt_completed'",
                     (attempt.lease.attempt_id,)) == f"{before} -> {outcome}"


def test_a_failed_attempt_requeues_the_run_with_backoff_by_database_time(
        world: World, engine: Any) -> None:
    pool = world.pool()
    [run_id] = world.runs(world.task(max_attempts=3, backoff_ms=60_000, cap_ms=600_000))
    [attempt] = _claim(engine, pool, _worker(engine, pool))
    complete_attempt(engine, s3=None, bucket=None, pool_id=pool,
                     report=_done(attempt.lease, "failed", 1))
    status, wait = world.one("SELECT status, extract(epoch FROM not_before - now())"
                             " FROM runs WHERE id = %s", (run_id,))
    assert status == "queued" and 29 <= float(wait) <= 60  # equal jitter over [30 s, 60 s]


def test_recovery_names_not_started_and_lost_and_ends_runs_without_attempts_left(
        world: World, engine: Any) -> None:
    pool = world.pool()
    [never_started] = world.runs(world.task(max_attempts=2, backoff_ms=20_000,
                                            cap_ms=20_000))
    [started] = world.runs(world.task(max_attempts=1))
    inc = _worker(engine, pool)
    claimed = {a.run_id: a for a in _claim(engine, pool, inc)}
    report_started(engine, CONFIG, pool_id=pool,
                   report=StartedReport(claimed[started].lease, 7))
    live = world.runs(world.task())  # a third, still leased, is left alone
    [kept] = _claim(engine, pool, inc)
    for run in (never_started, started):
        world.expire(claimed[run].lease.attempt_id)
    result = LeaseRecovery(engine, RecoveryConfig(batch=10), rng=random.Random(1)).run_once()
    assert (result.lost, result.requeued, result.runs_lost) == (2, 1, 1)
    assert result.reasons == {"not_started": 1, "lost": 1}
    assert world.attempt(claimed[never_started].lease.attempt_id)[:2] == ("lost",
                                                                          "not_started")
    assert world.attempt(claimed[started].lease.attempt_id)[:2] == ("lost", "lost")
    status, wait = world.one("SELECT status, extract(epoch FROM not_before - now())"
                             " FROM runs WHERE id = %s", (never_started,))
    assert status == "queued" and 9 <= float(wait) <= 20
    assert world.run_status(started) == "lost"
    assert kept.run_id == live[0] and world.attempt(kept.lease.attempt_id)[0] == "claimed"
    assert LeaseRecovery(engine).run_once().lost == 0  # nothing twice


def test_completion_racing_recovery_with_a_short_lease_has_exactly_one_winner(
        world: World, engine: Any) -> None:
    pool = world.pool()
    inc = _worker(engine, pool)
    recovery = LeaseRecovery(engine)
    rng = random.Random(11)
    wins = {"completion": 0, "recovery": 0}
    for _ in range(40):
        [run_id] = world.runs(world.task())
        [attempt] = _claim(engine, pool, inc)
        world.sql("UPDATE attempts SET lease_expires_at = clock_timestamp()"
                  " + make_interval(secs => %s) WHERE id = %s",
                  (rng.uniform(0, 0.02), attempt.lease.attempt_id))
        barrier = threading.Barrier(2)
        outcome: dict[str, Any] = {}

        def complete(lease: Any = attempt.lease, out: dict[str, Any] = outcome,
                     gate: threading.Barrier = barrier) -> None:
            gate.wait()
            try:
                complete_attempt(engine, s3=None, bucket=None, pool_id=pool,
                                 report=_done(lease))
                out["completed"] = True
            except LeaseLostError:
                out["completed"] = False

        def recover(gate: threading.Barrier = barrier) -> None:
            gate.wait()
            recovery.run_once()

        threads = [threading.Thread(target=complete), threading.Thread(target=recover)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        world.sql("SELECT pg_sleep(0.03)")
        recovery.run_once()  # a lease neither side took in the race is recovered now
        status, reason, completion = world.attempt(attempt.lease.attempt_id)
        if outcome["completed"]:
            wins["completion"] += 1
            assert (status, reason) == ("succeeded", None) and completion is not None
            assert world.run_status(run_id) == "succeeded"
        else:
            wins["recovery"] += 1
            assert status == "lost" and completion is None  # the loser changed nothing
            assert world.run_status(run_id) == "lost"
            assert world.one("SELECT count(*) FROM events WHERE attempt_id = %s"
                             " AND kind = 'attempt_completed'",
                             (attempt.lease.attempt_id,)) == 0
    assert wins["completion"] + wins["recovery"] == 40


def test_the_recovery_loop_recovers_in_the_background_and_stops(
        world: World, engine: Any) -> None:
    """Recovery runs in the replica's one loop (``PeriodicService``, as serve runs it)."""
    recovery = LeaseRecovery(engine, RecoveryConfig(interval_s=0.05))
    service = PeriodicService("lease_recovery", recovery.run_once, period_s=0.05,
                              stop_budget_s=5, more=lambda r: bool(r.full))
    pool = world.pool()
    [run_id] = world.runs(world.task())
    [attempt] = _claim(engine, pool, _worker(engine, pool))
    world.expire(attempt.lease.attempt_id)
    service.start()
    try:
        for _ in range(100):
            if world.run_status(run_id) == "lost":
                break
            world.sql("SELECT pg_sleep(0.05)")
    finally:
        assert service.stop() is True
    assert service.health().failures == 0
    assert world.attempt(attempt.lease.attempt_id)[:2] == ("lost", "not_started")


def test_a_removed_task_s_run_is_not_retried_by_completion_nor_recovery(
        world: World, engine: Any) -> None:
    """Dispatch never claims a removed task's run: a retry queued for it would wait forever.
    A failed or lost attempt of a task removed meanwhile ends its run instead."""
    pool = world.pool()
    inc = _worker(engine, pool)
    [failing] = world.runs(world.task(max_attempts=3, backoff_ms=0, cap_ms=0))
    [losing] = world.runs(world.task(max_attempts=3, backoff_ms=0, cap_ms=0))
    claimed = {a.run_id: a for a in _claim(engine, pool, inc)}
    world.sql("UPDATE tasks SET deleted_at = now()")
    complete_attempt(engine, s3=None, bucket=None, pool_id=pool,
                     report=_done(claimed[failing].lease, "failed", 1))
    assert world.run_status(failing) == "failed"
    world.expire(claimed[losing].lease.attempt_id)
    result = LeaseRecovery(engine).run_once()
    assert (result.lost, result.requeued, result.runs_lost) == (1, 0, 1)
    assert world.run_status(losing) == "lost"
