"""One retention replica as its own process, for the four-replica drill (issue 4; ADR-0379 §2–§4).

    python retention_replica.py --database-url URL --endpoint URL --probe-bucket B
        --replica-id ID --events FILE --ready-file FILE --go-file FILE
        [--lease-s 5] [--claims 8] [--budget-s 4] [--retry-base-s 1] [--stall-fraction 0.005]
        [--seed N]

It builds the production sweeper (``RunAttemptLogRetentionSweeper``: pool, owner incarnation,
boto3 client through the fault proxy), probes the backend, writes ``--ready-file``, waits for
``--go-file``, then sweeps (``run_once`` in a loop) until SIGTERM, and exits 0 after the sweep
in flight ends.

Random lease expiry: with probability ``--stall-fraction`` per DELETE, the replica pauses after
its validated HEAD until its claim's lease has expired plus 0.2–1.0 s, then sends the DELETE
anyway (a GC pause or a frozen VM): another replica may have claimed the row meanwhile.

Every claim it works on and every DELETE it sends appends one JSON line to ``--events`` (one
``write`` each, O_APPEND): ``{"ev": "claim", "attempt", "owner", "token", "version",
"lease_expires_at"}`` (lease end, ISO 8601 with offset, database clock), ``{"ev": "delete",
"attempt", "token", "stalled", "sent", "outcome" | "error"}`` and, when a failure released
the claim early, ``{"ev": "released", "attempt", "token", "failure", "due_at"}`` (the next
claim's earliest start, database clock).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "s3"))

from s3_services import CREDS  # noqa: E402

from qinglong.control.db.engine import create_engine  # noqa: E402
from qinglong.control.retention import finalize as fin  # noqa: E402
from qinglong.control.retention.claims import Claim, process_owner  # noqa: E402
from qinglong.control.retention.objects import (  # noqa: E402
    ArtifactIdentity,
    DeleteResult,
    ObjectStoreError,
    make_client,
)
from qinglong.control.retention.sweeper import RunAttemptLogRetentionSweeper  # noqa: E402


class EventLog:
    def __init__(self, path: str) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        self._lock = threading.Lock()

    def write(self, **event: Any) -> None:
        """One line, one ``write`` (O_APPEND): in the file for any reader as soon as this
        returns, also if the process dies next (no fsync: only a machine crash loses it, and
        that ends the test anyway)."""
        line = (json.dumps(event, sort_keys=True) + "\n").encode()
        with self._lock:
            os.write(self._fd, line)


class DrillReplica(RunAttemptLogRetentionSweeper):
    """The production sweeper, recording its claims and DELETEs and pausing past some leases."""

    def __init__(self, *args: Any, events: EventLog, stall_fraction: float,
                 rng: random.Random, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._events, self._stall, self._rng = events, stall_fraction, rng
        self._current: Claim | None = None
        real_delete = self.store.delete

        def delete(identity: ArtifactIdentity, etag: str | None) -> DeleteResult:
            c = self._current
            assert c is not None
            stalled = self._rng.random() < self._stall
            if stalled:  # sleep through the lease (database clock, same host)
                time.sleep(max(0.0, c.lease_expires_at.timestamp() - time.time())
                           + self._rng.uniform(0.2, 1.0))
            sent = time.time()
            try:
                result = real_delete(identity, etag)
            except ObjectStoreError as exc:
                self._events.write(ev="delete", attempt=c.attempt_id, token=c.token,
                                   stalled=stalled, sent=sent, error=exc.failure_class)
                raise
            self._events.write(ev="delete", attempt=c.attempt_id, token=c.token,
                               stalled=stalled, sent=sent, outcome=result.outcome)
            return result

        self.store.delete = delete  # type: ignore[method-assign]

    def _retire(self, c: Claim, *, deletes_left: int,
                lease_deadline: float) -> tuple[fin.Outcome | None, int]:
        self._current = c
        self._events.write(ev="claim", attempt=c.attempt_id, owner=c.owner, token=c.token,
                           version=c.version, lease_expires_at=c.lease_expires_at.isoformat())
        return super()._retire(c, deletes_left=deletes_left, lease_deadline=lease_deadline)

    def _fail(self, c: Claim, failure: fin.FailureClass,
              counts: Counter[str]) -> fin.FailureRecorded | None:
        recorded = super()._fail(c, failure, counts)
        if recorded is not None:
            self._events.write(ev="released", attempt=c.attempt_id, token=c.token,
                               failure=failure.value, due_at=recorded.due_at.isoformat())
        return recorded


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for name in ("database-url", "endpoint", "probe-bucket", "replica-id", "events",
                 "ready-file", "go-file"):
        parser.add_argument(f"--{name}", required=True)
    parser.add_argument("--lease-s", type=float, default=5.0)
    parser.add_argument("--claims", type=int, default=8)
    parser.add_argument("--budget-s", type=float, default=4.0)
    parser.add_argument("--retry-base-s", type=float, default=1.0)
    parser.add_argument("--stall-fraction", type=float, default=0.005)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    engine = create_engine(args.database_url, pool_size=2, max_overflow=0)
    config = RunAttemptLogRetentionSweeper.Config(
        claims_per_sweep=args.claims, deletes_per_sweep=args.claims, budget_s=args.budget_s,
        lease_s=args.lease_s, stop_budget_s=10, retry_base_s=args.retry_base_s)
    replica = DrillReplica(
        engine, make_client(args.endpoint, timeout_s=5, **CREDS),
        process_owner(args.replica_id), probe_bucket=args.probe_bucket, config=config,
        events=EventLog(args.events), stall_fraction=args.stall_fraction,
        rng=random.Random(args.seed))
    verdict = replica.probe()
    Path(args.ready_file).write_text(verdict.status)
    while not stop.is_set() and not Path(args.go_file).exists():
        time.sleep(0.02)
    while not stop.is_set():
        if replica.run_once().claimed == 0:
            stop.wait(0.05)
    engine.dispose()
    return 0


if __name__ == "__main__":
    sys.exit(main())
