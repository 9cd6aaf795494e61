"""The failover drill's verdict, computed from the facts: the database (occurrence ledger,
runs, attempts, events, retention controls, tombstones), the S3 server (object versions
and delete markers, and the DELETE requests our proxy forwarded to it) and the process
samples of ``drill_probes.ProcessSampler``. Never from a log. Each function returns counts
(for the drill's JSON) and the first few offending ids (for the assertion message).
Imported as a plain module (no pytest).
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

SECOND = timedelta(seconds=1)
TERMINAL = ("succeeded", "failed", "lost", "cancelled", "timed_out")
LIVE_ATTEMPT = ("claimed", "starting", "running")
ATTEMPT_OUTCOME_EVENTS = ("attempt_completed", "attempt_lost")
RUN_END_EVENTS = ("run_finished", "run_lost")
TICK_LAG = timedelta(seconds=5)  # a scheduler tick (500 ms) late on a loaded machine
STUCK_SLACK = timedelta(seconds=15)  # a lifecycle's period + its failure backoff cap (5 s)


def ledger(conn: Any, task_id: str, disabled_at: datetime) -> dict[str, Any]:
    """Every slot of ``task_id`` from the first after its creation until it was disabled
    (``disabled_at``, less ``TICK_LAG``: slots after the last tick are never recorded) has
    exactly one outcome, and every
    ``run_created`` names exactly one run of that slot.

    Returns ``{"slots", "outcomes", "duplicated_slots", "missing_slots", "runs_per_slot",
    "examples"}``: ``duplicated_slots`` slots with two outcomes or more, ``missing_slots``
    slots without one (including a late start or an early end), ``runs_per_slot`` slots with
    more than one run or runs whose ledger row is missing or names another slot."""
    rows = conn.execute(
        "SELECT outcome, first_slot, last_slot, slot_count, run_id::text FROM occurrences"
        " WHERE task_id = %s ORDER BY first_slot", (task_id,)).fetchall()
    runs = dict(conn.execute("SELECT id::text, scheduled_for FROM runs WHERE task_id = %s",
                             (task_id,)).fetchall())
    (created_at,) = conn.execute("SELECT created_at FROM tasks WHERE id = %s",
                                 (task_id,)).fetchone()
    slots: Counter[datetime] = Counter()
    outcomes: Counter[str] = Counter()
    created: dict[str, datetime] = {}
    for outcome, first, last, count, run_id in rows:
        span = int((last - first) / SECOND) + 1
        for i in range(span):
            slots[first + i * SECOND] += 1
        outcomes[outcome] += count
        if run_id is not None:
            created[run_id] = first
    start = created_at.replace(microsecond=0) + SECOND
    end = disabled_at.replace(microsecond=0) - TICK_LAG
    expected = {start + i * SECOND for i in range(int((end - start) / SECOND) + 1)}
    twice = sorted(s for s, n in slots.items() if n > 1)
    missing = sorted(expected - set(slots))
    per_slot = Counter(runs.values())
    bad_runs = sorted({r for r, slot in runs.items() if per_slot[slot] > 1
                       or created.get(r) != slot} | (set(created) - set(runs)))
    return {"slots": len(slots), "outcomes": dict(outcomes),
            "duplicated_slots": len(twice), "missing_slots": len(missing),
            "runs_per_slot": len(bad_runs),
            "examples": [s.isoformat() for s in (twice + missing)[:5]] + bad_runs[:5]}


def attempts(conn: Any, task_ids: list[str]) -> dict[str, Any]:
    """Runs and attempts of ``task_ids``: ``attempts_completed_twice`` (two outcome events
    or more), ``attempts_without_outcome`` (terminal without one), ``runs_finished_twice``,
    ``runs_not_terminal``, ``attempts_not_terminal``, ``stuck_claims`` (a live attempt whose
    lease expired more than ``STUCK_SLACK`` ago: lease recovery should have taken it), the
    attempts by status and reason, and (information, not a fault) ``ended_without_log``:
    attempts that ended by their command's outcome without a recorded log (the worker
    could not upload it before its fence deadline; one completed without output has none
    to record)."""
    rows = conn.execute(
        "SELECT a.id::text, a.status, coalesce(a.reason, ''), a.lease_expires_at < now() - %s,"
        " EXISTS (SELECT 1 FROM run_attempt_log_artifacts l WHERE l.attempt_id = a.id)"
        "  OR coalesce((a.completion ->> 'no_output')::boolean, false)"
        " FROM attempts a JOIN runs r ON r.id = a.run_id WHERE r.task_id = ANY(%s::uuid[])",
        (STUCK_SLACK, task_ids)).fetchall()
    outcome_events = Counter(r[0] for r in conn.execute(
        "SELECT e.attempt_id::text FROM events e JOIN runs r ON r.id = e.run_id"
        " WHERE r.task_id = ANY(%s::uuid[]) AND e.kind = ANY(%s)",
        (task_ids, list(ATTEMPT_OUTCOME_EVENTS))).fetchall())
    run_rows = conn.execute("SELECT id::text, status FROM runs WHERE task_id = ANY(%s::uuid[])",
                            (task_ids,)).fetchall()
    run_ends = Counter(r[0] for r in conn.execute(
        "SELECT e.run_id::text FROM events e JOIN runs r ON r.id = e.run_id"
        " WHERE r.task_id = ANY(%s::uuid[]) AND e.kind = ANY(%s)",
        (task_ids, list(RUN_END_EVENTS))).fetchall())
    twice = [a for a, n in outcome_events.items() if n > 1]
    without = [a for a, status, *_ in rows if status in TERMINAL and not outcome_events[a]]
    runs_twice = [r for r, n in run_ends.items() if n > 1]
    open_runs = [r for r, status in run_rows if status not in TERMINAL]
    open_attempts = [a for a, status, *_ in rows if status not in TERMINAL]
    stuck = [a for a, status, _, expired, _ in rows if status in LIVE_ATTEMPT and expired]
    no_log = [a for a, status, _, _, log in rows
              if status in ("succeeded", "failed", "timed_out") and not log]
    return {"runs": len(run_rows), "attempts": len(rows),
            "runs_by_status": dict(Counter(s for _, s in run_rows)),
            "attempts_by_status": dict(Counter(f"{s}/{r}" if r else s for _, s, r, *_ in rows)),
            "ended_without_log": len(no_log),
            "attempts_completed_twice": len(twice),
            "attempts_without_outcome": len(without), "runs_finished_twice": len(runs_twice),
            "runs_not_terminal": len(open_runs), "attempts_not_terminal": len(open_attempts),
            "stuck_claims": len(stuck),
            "examples": (twice + without + runs_twice + open_runs + stuck)[:5]}


def expired_lease_processes(conn: Any, samples: list[tuple[float, dict[int, str]]]
                            ) -> dict[str, Any]:
    """Processes seen alive after their attempt's lease had expired. A lease that expired is
    never renewed (every renewal requires an unexpired lease), so the final
    ``lease_expires_at`` is the lease the process outlived; a sample taken (wall clock, this
    host's and so the database's) after it is a fault. ``attempts_sampled``: attempts whose
    processes were seen at all (the probe worked)."""
    seen: dict[str, float] = {}  # attempt -> the latest sample that saw a process of it
    for at, pids in samples:
        for attempt in pids.values():
            seen[attempt] = max(at, seen.get(attempt, 0.0))
    leases = dict(conn.execute(
        "SELECT id::text, lease_expires_at FROM attempts WHERE id = ANY(%s::uuid[])",
        (list(seen),)).fetchall()) if seen else {}
    late = sorted(a for a, at in seen.items()
                  if leases.get(a) is not None
                  and datetime.fromtimestamp(at, UTC) > leases[a])
    return {"attempts_sampled": len(seen), "expired_lease_processes": len(late),
            "examples": late[:5]}


def retention(conn: Any, s3: Any, bucket: str, deletes: list[dict[str, Any]]
              ) -> dict[str, Any]:
    """Log retention after the drill: ``retention_pending`` control rows left,
    ``stuck_retention_claims`` (claimed, lease expired more than ``STUCK_SLACK`` ago),
    ``tombstones_lost`` (a recorded object version gone from S3 without a tombstone),
    ``tombstoned_objects_present`` (a tombstone whose version is still in S3),
    ``delete_markers`` under ``p/`` (retention deletes exact versions: none expected), and
    ``objects_deleted_twice`` ((key, version) pairs the proxy forwarded more than one
    successful DELETE for; the proxy logs the path-style key ``/<bucket>/<key>``)."""
    artifacts = {r[0]: (r[1], r[2]) for r in conn.execute(
        "SELECT attempt_id::text, object_key, version_id FROM run_attempt_log_artifacts"
        " WHERE bucket = %s", (bucket,)).fetchall()}
    tombstones = dict(conn.execute(
        "SELECT attempt_id::text, outcome FROM run_attempt_log_artifact_tombstones").fetchall())
    controls = conn.execute(
        "SELECT attempt_id::text, state, claim_owner IS NOT NULL"
        " AND lease_expires_at < now() - %s FROM run_attempt_log_retention_controls",
        (STUCK_SLACK,)).fetchall()
    versions, markers = _versions(s3, bucket)
    lost = [a for a, kv in artifacts.items() if kv not in versions and a not in tombstones]
    present = [a for a in tombstones if artifacts.get(a) in versions]
    ok_deletes = Counter((str(d["key"]).removeprefix(f"/{bucket}/"), d["version"])
                         for d in deletes
                         if d.get("status") is not None and 200 <= int(d["status"]) < 300
                         and str(d["key"]).startswith(f"/{bucket}/p/"))
    twice = [f"{k}?versionId={v}" for (k, v), n in ok_deletes.items() if n > 1]
    return {"artifacts": len(artifacts), "tombstones": dict(Counter(tombstones.values())),
            "retention_pending": len(controls),
            "stuck_retention_claims": sum(1 for c in controls if c[2]),
            "tombstones_lost": len(lost), "tombstoned_objects_present": len(present),
            "delete_markers": len(markers), "objects_deleted_twice": len(twice),
            "examples": (lost + present + twice + [c[0] for c in controls])[:5]}


def _versions(s3: Any, bucket: str) -> tuple[set[tuple[str, str]], list[tuple[str, str]]]:
    """(key, version id) of every object version and every delete marker under ``p/``."""
    versions: set[tuple[str, str]] = set()
    markers: list[tuple[str, str]] = []
    for page in s3.get_paginator("list_object_versions").paginate(Bucket=bucket, Prefix="p/"):
        versions |= {(v["Key"], v["VersionId"]) for v in page.get("Versions", [])}
        markers += [(m["Key"], m["VersionId"]) for m in page.get("DeleteMarkers", [])]
    return versions, markers
