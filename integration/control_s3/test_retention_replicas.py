"""Four replica processes retire 2,000 logs through a lossy proxy (issue 4; ADR-0379 §2–§4).

Real PostgreSQL (runtime role), moto's server behind our fault proxy dropping the response of
5 % of DELETEs (the server executed them), and random lease expiry: each replica pauses past
its lease before some DELETEs (``retention_replica.py``). Checks:

- every artifact is tombstoned exactly once and no object (or object version) is left;
- zero deletes of a wrong object or version: every DELETE the proxy saw names a recorded key
  with exactly its recorded VersionId (versioned) or exactly its recorded ETag as ``If-Match``
  (unversioned), never both;
- duplicates (a second DELETE of one object version) are reported; each comes from a
  different claim, and every later claim of an artifact began (database clock) only after the
  earlier claim's lease had expired.
"""

from __future__ import annotations

import hashlib
import json
import signal
import subprocess
import sys
import time
import urllib.parse
from collections import Counter, defaultdict
from collections.abc import Callable
from datetime import datetime, timedelta
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from pg_control_db import PgDb
from sweep_world import Logged, rows, seed_logs

pytestmark = [pytest.mark.integration, pytest.mark.postgres]

HERE = Path(__file__).resolve().parent
REPLICAS = 4
ARTIFACTS = 2000
LEASE_S = 5.0
DROP_FRACTION = 0.05
DEADLINE_S = 240.0


def _etag(log: Logged) -> str:
    """The ETag S3 gives a single-part PUT: the quoted MD5 of the body."""
    return '"' + hashlib.md5(log.body, usedforsecurity=False).hexdigest() + '"'


def _events(paths: list[Path]) -> list[dict[str, Any]]:
    return [json.loads(line) for p in paths if p.exists()
            for line in p.read_text().splitlines() if line]


def _start(tmp: Path, n: int, url: str, endpoint: str, probe_bucket: str
           ) -> tuple[list[subprocess.Popen[bytes]], list[Path]]:
    procs, logs = [], []
    for i in range(n):
        log = tmp / f"replica-{i}.jsonl"
        logs.append(log)
        with open(tmp / f"replica-{i}.err", "wb") as err:
            procs.append(subprocess.Popen(
                [sys.executable, str(HERE / "retention_replica.py"), "--database-url", url,
                 "--endpoint", endpoint, "--probe-bucket", probe_bucket, "--replica-id",
                 f"replica-{i}", "--events", str(log), "--ready-file", str(tmp / f"ready-{i}"),
                 "--go-file", str(tmp / "go"), "--lease-s", str(LEASE_S), "--seed", str(i)],
                stderr=err))
    return procs, logs


def _stop(procs: list[subprocess.Popen[bytes]]) -> list[int | None]:
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    codes = []
    for p in procs:
        try:
            codes.append(p.wait(timeout=30))
        except subprocess.TimeoutExpired:
            p.kill()
            codes.append(p.wait())
    return codes


def test_four_replicas_retire_2000_logs_exactly_once_through_lost_responses(
        pg_db: PgDb, direct_s3: Any, make_bucket: Callable[[bool], str], proxy: Any,
        tmp_path: Path) -> None:
    plain, versioned, probe_bucket = make_bucket(False), make_bucket(True), make_bucket(False)
    with pg_db.connect() as conn, pg_db.sa() as sa:
        logs = (seed_logs(sa, direct_s3, plain, ARTIFACTS // 2, repeat=2)
                + seed_logs(sa, direct_s3, versioned, ARTIFACTS // 2, repeat=2))
    by_key = {f"/{log.identity.bucket}/{log.identity.key}": log for log in logs}
    assert len(by_key) == ARTIFACTS
    runtime_url = pg_db.url + "?options=" + urllib.parse.quote(f"-c role={pg_db.runtime_role}")

    procs, event_logs = _start(tmp_path, REPLICAS, runtime_url, proxy.endpoint, probe_bucket)
    try:
        deadline = time.monotonic() + 60
        while not all((tmp_path / f"ready-{i}").exists() for i in range(REPLICAS)):
            assert all(p.poll() is None for p in procs), "a replica exited before it was ready"
            assert time.monotonic() < deadline, "replicas not ready within 60 s"
            time.sleep(0.05)
        verdicts = {(tmp_path / f"ready-{i}").read_text() for i in range(REPLICAS)}
        assert verdicts == {"safe"}, verdicts
        proxy.set(drop_delete_fraction=DROP_FRACTION)
        (tmp_path / "go").touch()
        deadline = time.monotonic() + DEADLINE_S
        while True:
            with pg_db.connect() as conn, pg_db.sa() as sa:
                left = rows(conn, "SELECT state, count(*) FROM"
                                  " run_attempt_log_retention_controls GROUP BY state")
            assert ("manual",) not in {(s,) for s, _ in left}, left
            if not left:
                break
            assert all(p.poll() is None for p in procs), "a replica died mid-drill"
            assert time.monotonic() < deadline, f"not settled in {DEADLINE_S} s: {left}"
            time.sleep(0.5)
    finally:
        codes = _stop(procs)
    assert codes == [0] * REPLICAS, [
        (tmp_path / f"replica-{i}.err").read_text()[-2000:] for i in range(REPLICAS)]

    # every artifact tombstoned exactly once; no object or version left in either bucket
    with pg_db.connect() as conn, pg_db.sa() as sa:
        stones = rows(conn, "SELECT attempt_id::text, outcome"
                            " FROM run_attempt_log_artifact_tombstones")
    assert Counter(a for a, _ in stones) == Counter(log.attempt_id for log in logs)
    outcome = dict(stones)
    assert direct_s3.list_objects_v2(Bucket=plain).get("KeyCount") == 0
    listing = direct_s3.list_object_versions(Bucket=versioned)
    assert listing.get("Versions", []) == [] and listing.get("DeleteMarkers", []) == []

    # zero deletes of a wrong object or version: exact VersionId XOR the recorded If-Match
    sent = [d for d in proxy.deletes() if d["key"] in by_key]
    assert len(sent) + sum("ql3-probe/" in d["key"] for d in proxy.deletes()) == len(
        proxy.deletes()), "a DELETE named a key that is not a recorded artifact"
    wrong = []
    for d in sent:
        log = by_key[d["key"]]
        want = ((log.identity.version_id, None) if log.identity.version_id
                else (None, _etag(log)))
        if (d["version"], d["forwarded_if_match"]) != want:
            wrong.append(d)
    assert wrong == []

    # duplicates: one DELETE per claim; claims of one artifact never overlap (database clock):
    # a later claim starts only after the earlier lease expired, or after the earlier claim
    # was released with a failure and its retry time came
    events = _events(event_logs)
    claims: dict[str, list[tuple[datetime, str]]] = defaultdict(list)
    released = {(e["attempt"], e["token"]): datetime.fromisoformat(e["due_at"])
                for e in events if e["ev"] == "released"}
    for e in events:
        if e["ev"] == "claim":
            claims[e["attempt"]].append((datetime.fromisoformat(e["lease_expires_at"]),
                                         e["token"]))
    deletes_by_claim = Counter((e["attempt"], e["token"]) for e in events if e["ev"] == "delete")
    assert max(deletes_by_claim.values()) == 1
    lease = timedelta(seconds=LEASE_S)
    for attempt, held in claims.items():
        held.sort()
        for (end, token), (later_end, _) in pairwise(held):
            free_from = released.get((attempt, token), end)
            assert later_end - lease >= free_from, (attempt, free_from, later_end - lease)
    per_version = Counter((d["key"], d["version"]) for d in sent)
    worker_sent = Counter(e["attempt"] for e in events if e["ev"] == "delete")
    assert Counter(by_key[k].attempt_id for k, _ in per_version.elements()) == worker_sent
    duplicates = {k: n for k, n in per_version.items() if n > 1}
    # a second DELETE of one object version is sent only after the first claim's lease ended
    # (same host: the database clock and time.time() are the same clock)
    for key, _version in duplicates:
        attempt = by_key[key].attempt_id
        first_lease_end = min(end for end, _ in claims[attempt]).timestamp()
        times = sorted(e["sent"] for e in events
                       if e["ev"] == "delete" and e["attempt"] == attempt)
        assert all(t >= first_lease_end for t in times[1:]), (attempt, first_lease_end, times)
    dropped = [d for d in sent if d["dropped"]]
    stalled = sum(e["ev"] == "delete" and e["stalled"] for e in events)
    reclaimed = {a for a, v in claims.items() if len(v) > 1}
    # the only DELETE of an object was executed but its answer lost: no claimant ever heard
    # "deleted", so the artifact can only have been settled from a HEAD as already_absent
    lost_only = {by_key[d["key"]].attempt_id for d in dropped
                 if per_version[(d["key"], d["version"])] == 1 and d["status"] in (200, 204)}
    print(f"\nretention drill: {ARTIFACTS} artifacts, {REPLICAS} replicas: {len(sent)} DELETEs,"
          f" {len(dropped)} responses dropped, {stalled} past-lease pauses,"
          f" {len(reclaimed)} artifacts claimed more than once, {len(duplicates)} object"
          f" versions deleted more than once"
          f" ({sum(duplicates.values()) - len(duplicates)} extra DELETEs, each sent after the"
          f" first claim's lease expired, all exact-version or If-Match), tombstones"
          f" {dict(Counter(outcome.values()))}")
    assert len(dropped) >= 40 and stalled >= 1, (len(dropped), stalled)
    assert {by_key[d["key"]].attempt_id for d in dropped} <= reclaimed
    assert lost_only and {outcome[a] for a in lost_only} == {"already_absent"}
