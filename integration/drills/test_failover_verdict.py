"""The failover drill's verdict can fail: each check counts the fault it names when the facts
hold one (a slot fired twice or missing, an attempt completed twice, a process alive past its
lease, a log deleted without a tombstone or deleted twice, a delete marker). Facts come from
a small fake of the database connection and the S3 client; no service runs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import failover_verdict as verdict
import pytest

T0 = datetime(2026, 1, 1, 12, 0, 0, 500_000, tzinfo=UTC)  # the task's creation
S = timedelta(seconds=1)
SLOT0 = T0.replace(microsecond=0) + S


class FakeConn:
    """Answers each statement with the rows of the first ``answers`` key it contains."""

    def __init__(self, answers: dict[str, list[tuple[Any, ...]]]) -> None:
        self.answers = answers

    def execute(self, sql: str, params: Any = None) -> FakeConn:
        self._rows = next(rows for key, rows in self.answers.items() if key in sql)
        return self

    def fetchall(self) -> list[tuple[Any, ...]]:
        return self._rows

    def fetchone(self) -> tuple[Any, ...] | None:
        return self._rows[0] if self._rows else None


def _ledger(occurrences: list[tuple[Any, ...]], runs: list[tuple[str, datetime]],
            disabled_at: datetime = SLOT0 + 12 * S) -> dict[str, Any]:
    conn = FakeConn({"FROM occurrences": occurrences, "FROM runs": runs,
                     "FROM tasks": [(T0,)]})
    return verdict.ledger(conn, "task", disabled_at)


def test_a_whole_ledger_has_no_fault() -> None:
    out = _ledger([("run_created", SLOT0, SLOT0, 1, "r1"),
                   ("skipped_downtime", SLOT0 + S, SLOT0 + 6 * S, 6, None),
                   ("run_created", SLOT0 + 7 * S, SLOT0 + 7 * S, 1, "r2")],
                  [("r1", SLOT0), ("r2", SLOT0 + 7 * S)])
    assert (out["duplicated_slots"], out["missing_slots"], out["runs_per_slot"]) == (0, 0, 0)
    assert out["outcomes"] == {"run_created": 2, "skipped_downtime": 6}


def test_a_slot_with_two_outcomes_and_a_gap_are_counted() -> None:
    out = _ledger([("run_created", SLOT0, SLOT0, 1, "r1"),
                   ("backlog_full", SLOT0, SLOT0 + 2 * S, 3, None),
                   ("run_created", SLOT0 + 5 * S, SLOT0 + 7 * S, 1, "r2")],
                  [("r1", SLOT0), ("r2", SLOT0 + 5 * S)])
    assert out["duplicated_slots"] == 1  # SLOT0
    assert out["missing_slots"] == 2  # SLOT0+3, SLOT0+4


def test_a_late_first_slot_is_missing_and_two_runs_of_one_slot_are_counted() -> None:
    out = _ledger([("run_created", SLOT0 + S, SLOT0 + 7 * S, 7, "r1")],
                  [("r1", SLOT0 + S), ("r2", SLOT0 + S)])
    assert out["missing_slots"] == 1
    assert out["runs_per_slot"] == 2


def test_an_attempt_completed_twice_and_a_stuck_claim_are_counted() -> None:
    conn = FakeConn({
        "FROM attempts a JOIN runs": [("a1", "succeeded", "", False, False),
                                      ("a2", "running", "", True, False),
                                      ("a3", "lost", "not_started", False, False)],
        "e.attempt_id": [("a1",), ("a1",), ("a3",)],
        "SELECT id::text, status FROM runs": [("r1", "succeeded"), ("r2", "running")],
        "e.run_id": [("r1",), ("r1",)],
    })
    out = verdict.attempts(conn, ["t"])
    assert out["attempts_completed_twice"] == 1
    assert out["stuck_claims"] == 1
    assert out["runs_finished_twice"] == 1
    assert out["runs_not_terminal"] == 1 and out["attempts_not_terminal"] == 1
    assert out["attempts_by_status"] == {"succeeded": 1, "running": 1, "lost/not_started": 1}
    assert out["ended_without_log"] == 1  # a1


@pytest.mark.parametrize(("seen_at", "late"), [(T0 - S, 0), (T0 + S, 1)])
def test_a_process_seen_after_its_lease_expired_is_counted(seen_at: datetime,
                                                           late: int) -> None:
    conn = FakeConn({"FROM attempts": [("a1", T0)]})
    out = verdict.expired_lease_processes(conn, [(seen_at.timestamp(), {42: "a1"})])
    assert out == {"attempts_sampled": 1, "expired_lease_processes": late,
                   "examples": ["a1"] * late}


class FakeS3:
    def __init__(self, versions: list[tuple[str, str]], markers: list[tuple[str, str]]
                 ) -> None:
        self.page = {"Versions": [{"Key": k, "VersionId": v} for k, v in versions],
                     "DeleteMarkers": [{"Key": k, "VersionId": v} for k, v in markers]}

    def get_paginator(self, name: str) -> FakeS3:
        assert name == "list_object_versions"
        return self

    def paginate(self, **_: Any) -> list[dict[str, Any]]:
        return [self.page]


def test_retention_faults_are_counted() -> None:
    conn = FakeConn({
        "FROM run_attempt_log_artifacts": [("a1", "p/x/wlog-a1", "v1"),   # retired
                                           ("a2", "p/x/wlog-a2", "v2"),   # gone, no tombstone
                                           ("a3", "p/x/wlog-a3", "v3")],  # tombstone, present
        "FROM run_attempt_log_artifact_tombstones": [("a1", "deleted"), ("a3", "deleted")],
        "FROM run_attempt_log_retention_controls": [("a4", "pending", True)],
    })
    s3 = FakeS3([("p/x/wlog-a3", "v3")], [("p/x/wlog-a9", "m1")])
    deletes = [{"key": "/b/p/x/wlog-a1", "version": "v1", "status": 204},
               {"key": "/b/p/x/wlog-a1", "version": "v1", "status": 204},
               {"key": "/b/p/x/wlog-a2", "version": "v2", "status": None}]
    out = verdict.retention(conn, s3, "b", deletes)
    assert out["tombstones_lost"] == 1
    assert out["tombstoned_objects_present"] == 1
    assert out["objects_deleted_twice"] == 1
    assert out["delete_markers"] == 1
    assert (out["retention_pending"], out["stuck_retention_claims"]) == (1, 1)


def test_a_ledger_that_stops_before_the_disable_is_missing_its_tail() -> None:
    out = _ledger([("run_created", SLOT0, SLOT0, 1, "r1"),
                   ("backlog_full", SLOT0 + S, SLOT0 + 4 * S, 4, None)], [("r1", SLOT0)])
    assert out["missing_slots"] == 3  # SLOT0+5 .. SLOT0+7 (the disable at +12 s, less 5 s)
