"""The retention sweeper service: bounded claim → HEAD → DELETE → finalize (ADR-0379 §3–§4).

One sweep of one replica (docs/protocols.md §4.3):

1. claim at most ``claims_per_sweep`` (≤ 16) rows in a short transaction; the pooled connection
   goes back to the pool before any S3 call;
2. for each row, validated HEAD of the recorded object; present → DELETE by exact VersionId
   (versioned) or ``If-Match: <etag>`` (unversioned); absent → ``already_absent``;
3. finalize in a second short transaction (tombstone + delete the control), or
   ``record_failure`` with the error's failure class and a jittered retry time.

Bounds per sweep: claims, DELETE calls and a wall-clock budget. Rows a sweep does not reach
(budget spent, stop requested) stay leased and are settled by the next claim after their lease
expires: every claimed row is always settled or leased. No cursor across sweeps, no timer per
attempt. Every database step takes a connection of the SQLAlchemy engine (``db/engine.py``)
and returns it before S3 is called. ``in_transaction`` of the object store is wired to a
thread-local count of pooled connections this sweeper holds, so an S3 call with a
connection checked out raises TransactionHeldError (ADR-0379 §3: S3 never runs inside a
database transaction).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from qinglong.control.errors import FenceMismatchError
from qinglong.control.retention import finalize as fin
from qinglong.control.retention.claims import (
    MAX_CLAIM_LIMIT,
    MAX_LEASE_S,
    MIN_LEASE_S,
    Claim,
    ClaimOwner,
    claim,
)
from qinglong.control.retention.objects import (
    ArtifactIdentity,
    ArtifactIntegrityMismatchError,
    ObjectStoreError,
    S3ObjectStore,
)
from qinglong.control.retention.probe import probe_conditional_delete
from qinglong.control.retention.store_common import ProbeVerdict
from qinglong.shared.backoff import retry_delay_s
from qinglong.shared.errors import ValidationError

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
    from sqlalchemy import Connection, Engine

log = logging.getLogger(__name__)
MAX_DELETES_PER_SWEEP = 1000
UNAVAILABLE_REPROBE_S = 30.0  # re-probe an unavailable store at least this often
OUTAGE_AFTER_ROWS = 2  # consecutive artifact_unavailable rows that end a sweep early
FAILED_SWEEP_PAUSE_CAP_S = 5.0  # longest pause after failed sweeps (issue 11 item 8: a lost
# database is retried with backoff capped at 5 s)


def identity_of(c: Claim) -> ArtifactIdentity:
    """The S3 identity a claim must match: the recorded object plus our ``ql3-*`` metadata
    (project, run, attempt, artifact ids as written by the worker, docs/protocols.md §4.2).
    Raises ArtifactIntegrityMismatchError when the record itself is not a valid identity
    (e.g. a VersionId of ``null``): nothing is deleted by an identity we cannot trust."""
    try:
        return ArtifactIdentity(
            bucket=c.bucket, key=c.object_key, version_id=c.version_id,
            content_type=c.content_type, size=c.size_bytes, sha256=c.sha256,
            metadata={"project": c.project_id, "run": c.run_id, "attempt": c.attempt_id,
                      "artifact": c.artifact_id})
    except ValidationError as exc:
        raise ArtifactIntegrityMismatchError(f"recorded identity is invalid: {exc.field}"
                                             ) from None


@dataclass(frozen=True, slots=True)
class SweepResult:
    """Counts of one sweep. ``counts`` keys: ``deleted``, ``already_absent``, a failure class
    (``artifact_unavailable``, ``artifact_integrity_mismatch``, ``object_store_unsafe``,
    ``retirement_record_unavailable``), ``fence_mismatch`` (finalize or failure discarded: the
    next claimant settles it), ``left_leased`` (not reached: budget, stop, or an outage
    ended the sweep) and ``object_store_unavailable`` (1: the probe found the store
    unavailable, nothing was claimed). ``elapsed_s`` is wall-clock seconds."""

    claimed: int
    counts: Mapping[str, int] = field(default_factory=dict)
    elapsed_s: float = 0.0

    def __getitem__(self, key: str) -> int:
        return self.counts.get(key, 0)


class RunAttemptLogRetentionSweeper:
    """Bounded retention sweeps for one replica, run inline (``run_once``) or on one thread.

    ``engine`` is the SQLAlchemy engine of ``db/engine.py`` (give it a ``lock_timeout_ms`` so
    a sweep blocked by a table lock returns to its loop and to a pending stop); ``client`` a
    boto3 S3 client from ``objects.make_client``;
    ``probe_bucket`` the bucket the ``If-Match`` canary runs in. Raises ValidationError on a bad
    Config (the message names the numbers). # ADR-0379 §4
    """

    @dataclass(frozen=True, slots=True)
    class Config:
        """Bounds: ``claims_per_sweep`` 1..16 rows; ``deletes_per_sweep`` 1..1000 DELETE calls;
        ``budget_s`` wall-clock seconds per sweep, below ``lease_s``; ``lease_s`` 5..300 s;
        ``stop_budget_s`` seconds ``stop()`` waits for the running sweep (> 0; the row in
        flight finishes first, so give it more than two S3 client timeouts plus a
        transaction);
        ``interval_s`` pause between sweeps; ``probe_interval_s`` between backend probes;
        ``manual_after`` failures before ``manual``; ``retry_base_s`` the first retry delay's
        base (jittered, doubling, capped at 24 h; ADR-0379 §4); ``delete_guard_s`` seconds of
        lease that must remain before a DELETE is sent (0 ≤ guard < lease; None: the S3
        client's read timeout, at most half the lease), so a row slowed down by its HEAD is
        left leased rather than deleted by a claim that can no longer finalize it."""

        claims_per_sweep: int = MAX_CLAIM_LIMIT
        deletes_per_sweep: int = MAX_CLAIM_LIMIT
        budget_s: float = 20.0
        lease_s: float = 60.0
        stop_budget_s: float = 25.0
        interval_s: float = 5.0
        probe_interval_s: float = 300.0
        manual_after: int = fin.MANUAL_AFTER_DEFAULT
        retry_base_s: float = fin.RETRY_BASE_S
        delete_guard_s: float | None = None

        def validate(self) -> None:
            """Raise ValidationError naming the first bound that does not hold."""
            if not 1 <= self.claims_per_sweep <= MAX_CLAIM_LIMIT:
                raise ValidationError("claims_per_sweep", f"{self.claims_per_sweep} outside "
                                      f"1..{MAX_CLAIM_LIMIT} (ADR-0379 §4)")
            if not 1 <= self.deletes_per_sweep <= MAX_DELETES_PER_SWEEP:
                raise ValidationError("deletes_per_sweep", f"{self.deletes_per_sweep} outside "
                                      f"1..{MAX_DELETES_PER_SWEEP}")
            if not MIN_LEASE_S <= self.lease_s <= MAX_LEASE_S:
                raise ValidationError("lease_s", f"{self.lease_s} s outside "
                                      f"{MIN_LEASE_S}..{MAX_LEASE_S} s (ADR-0379 §4)")
            if not 0 < self.budget_s < self.lease_s:
                raise ValidationError("budget_s", f"{self.budget_s} s must be > 0 and below "
                                      f"the lease of {self.lease_s} s")
            if not self.stop_budget_s > 0:
                raise ValidationError("stop_budget_s", f"{self.stop_budget_s} s must be > 0")
            for name in ("interval_s", "probe_interval_s"):
                if not getattr(self, name) > 0:
                    raise ValidationError(name, f"{getattr(self, name)} s must be > 0")
            if self.manual_after < 1:
                raise ValidationError("manual_after", f"{self.manual_after} must be ≥ 1")
            if not 0 < self.retry_base_s <= fin.RETRY_CAP_S:
                raise ValidationError("retry_base_s", f"{self.retry_base_s} s outside "
                                      f"(0, {fin.RETRY_CAP_S:g}] s")
            if self.delete_guard_s is not None and not 0 <= self.delete_guard_s < self.lease_s:
                raise ValidationError("delete_guard_s", f"{self.delete_guard_s} s must be ≥ 0 "
                                      f"and below the lease of {self.lease_s} s")

    def __init__(self, engine: Engine, client: S3Client, owner: ClaimOwner, *,
                 probe_bucket: str, config: Config | None = None) -> None:
        self.config = config or self.Config()
        self.config.validate()
        self._engine, self._client, self._owner = engine, client, owner
        self._probe_bucket = probe_bucket
        self._local = threading.local()
        self.store = S3ObjectStore(client, in_transaction=self.holds_connection)
        self.verdict: ProbeVerdict | None = None
        self._probed_at = float("-inf")
        self._stop = threading.Event()
        self._stop_requested = False
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.on_sweep: Callable[[SweepResult], None] | None = None  # called after busy sweeps
        self.delete_guard_s = self.config.delete_guard_s
        if self.delete_guard_s is None:
            # botocore's Config has read_timeout (default 60 s); its stub does not declare it
            meta = getattr(client, "meta", None)
            read_timeout = getattr(getattr(meta, "config", None), "read_timeout", None)
            read_s = float(read_timeout) if isinstance(read_timeout, int | float) else 60.0
            self.delete_guard_s = min(read_s, self.config.lease_s / 2)

    def holds_connection(self) -> bool:
        """True while the calling thread holds a pooled connection of this sweeper."""
        return int(getattr(self._local, "held", 0)) > 0

    @contextmanager
    def _db(self) -> Iterator[Connection]:
        """An idle pooled connection, counted while held (``holds_connection``)."""
        with self._engine.connect() as conn:
            self._local.held = int(getattr(self._local, "held", 0)) + 1
            try:
                yield conn
            finally:
                self._local.held -= 1

    def probe(self) -> ProbeVerdict:
        """Run the ``If-Match`` canary and apply its verdict to the store (docs/protocols.md
        §4.3)."""
        verdict = probe_conditional_delete(self._client, self._probe_bucket,
                                           in_transaction=self.holds_connection)
        self.store.apply_verdict(verdict)
        self.verdict, self._probed_at = verdict, time.monotonic()
        if verdict.status != "safe":
            log.warning("object store %s: %s", verdict.status, verdict.reason)
        return verdict

    def probe_due(self) -> bool:
        """Whether the next sweep probes first: never probed, ``probe_interval_s`` passed, or
        the last verdict was ``unavailable`` and ``min(30 s, probe_interval_s)`` passed."""
        if self.verdict is None:
            return True
        every = self.config.probe_interval_s
        if self.verdict.status == "unavailable":
            every = min(UNAVAILABLE_REPROBE_S, every)
        return time.monotonic() - self._probed_at >= every

    def stop_requested(self) -> bool:
        """True once ``request_stop()`` or ``stop()`` was called (until the next ``start``)."""
        return self._stop_requested or self._stop.is_set()

    def running(self) -> bool:
        """True while the sweep thread started by ``start()`` is alive."""
        thread = self._thread
        return thread is not None and thread.is_alive()

    def request_stop(self) -> None:
        """Ask the sweep in flight (``run_once`` or the thread) to stop after its current row;
        the rows it has not reached stay leased. Safe from a signal handler: it only sets a
        flag (no lock); call ``stop()`` afterwards from normal code to join the thread."""
        self._stop_requested = True

    def run_once(self) -> SweepResult:
        """One bounded sweep; returns its counts. A database error on the claim propagates
        (nothing is leased then); per-row S3 and finalize errors are counted, never raised.

        Probes first when ``probe_due()``. While the store is ``unavailable`` it claims
        nothing (counts ``{"object_store_unavailable": 1}``), so an outage cannot push due
        rows towards ``manual``; two rows in a row failing ``artifact_unavailable`` end the
        sweep early (the rest stay leased) and make the next sweep probe again.
        """
        from sqlalchemy.exc import SQLAlchemyError

        cfg = self.config
        if self.probe_due():
            self.probe()
        started = time.monotonic()  # the budget bounds the claimed rows' work, not the probe
        if self.stop_requested():  # never claim rows a stopping sweep would only leave leased
            return SweepResult(0, {}, 0.0)
        if self.verdict is not None and self.verdict.status == "unavailable":
            return SweepResult(0, {"object_store_unavailable": 1}, time.monotonic() - started)
        # the lease runs from the claim statement's clock, later than this instant: by the
        # local clock it ends no earlier than lease_deadline
        lease_deadline = time.monotonic() + cfg.lease_s
        with self._db() as conn:  # ADR-0379 §3 step 1: short claim transaction
            claims = claim(conn, self._owner, limit=cfg.claims_per_sweep, lease_s=cfg.lease_s,
                           versioned_only=self.verdict is not None
                           and self.verdict.status == "unsafe")
        counts: Counter[str] = Counter()
        deletes = unavailable_run = 0
        for index, c in enumerate(claims):
            if (self.stop_requested() or time.monotonic() - started >= cfg.budget_s
                    or unavailable_run >= OUTAGE_AFTER_ROWS):
                counts["left_leased"] += len(claims) - index
                break
            try:
                outcome, deleted = self._retire(c, deletes_left=cfg.deletes_per_sweep - deletes,
                                                lease_deadline=lease_deadline)
            except ObjectStoreError as exc:
                self._fail(c, fin.FailureClass(exc.failure_class), counts)
                if exc.failure_class == fin.FailureClass.ARTIFACT_UNAVAILABLE:
                    unavailable_run += 1
                    if unavailable_run >= OUTAGE_AFTER_ROWS:
                        self._probed_at = float("-inf")  # looks like an outage: re-probe
                continue
            unavailable_run = 0
            deletes += deleted
            if outcome is None:
                counts["left_leased"] += 1
                continue
            try:
                with self._db() as conn:  # ADR-0379 §3 step 5: second short transaction
                    fin.finalize(conn, c, outcome)
                counts[outcome.value] += 1
            except FenceMismatchError:
                counts["fence_mismatch"] += 1
            except SQLAlchemyError:  # the database (or the pool) failed: nothing written
                self._fail(c, fin.FailureClass.RETIREMENT_RECORD_UNAVAILABLE, counts)
        return SweepResult(len(claims), dict(counts), time.monotonic() - started)

    def _retire(self, c: Claim, *, deletes_left: int,
                lease_deadline: float) -> tuple[fin.Outcome | None, int]:
        """HEAD, then DELETE when present: ``(outcome, DELETE calls made)``; outcome None when
        the delete budget is spent or less than ``delete_guard_s`` of the lease is left at
        ``lease_deadline`` (monotonic seconds): the row stays leased. Raises
        ObjectStoreError."""
        ident = identity_of(c)
        head = self.store.head(ident)  # ADR-0379 §3.1 validated HEAD
        if head.state == "absent":
            return fin.Outcome.ALREADY_ABSENT, 0
        if deletes_left <= 0:
            return None, 0
        if time.monotonic() + (self.delete_guard_s or 0.0) > lease_deadline:
            log.info("lease of %s too short for a DELETE; leaving it leased", c.attempt_id)
            return None, 0
        result = self.store.delete(ident, head.etag)  # ADR-0379 §3.2 exact or If-Match
        return fin.Outcome(result.outcome), 1

    def _fail(self, c: Claim, failure: fin.FailureClass,
              counts: Counter[str]) -> fin.FailureRecorded | None:
        """Persist ``failure`` with a retry time (ADR-0379 §4) and return what was recorded;
        None when the fence no longer held or the write failed (the row stays leased)."""
        from sqlalchemy.exc import SQLAlchemyError

        counts[failure.value] += 1
        try:
            with self._db() as conn:
                recorded = fin.record_failure(conn, c, failure,
                                              manual_after=self.config.manual_after,
                                              retry_base_s=self.config.retry_base_s)
        except SQLAlchemyError:
            log.warning("could not record %s for %s; the lease will expire", failure.value,
                        c.attempt_id)
            return None
        if recorded is None:
            counts["fence_mismatch"] += 1
        return recorded

    def start(self) -> None:
        """Probe the backend, then sweep on one daemon thread until ``stop()``. Idempotent."""
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return
            self._stop.clear()
            self._stop_requested = False
            self.probe()
            self._thread = threading.Thread(target=self._loop, name="ql3-retention-sweeper",
                                            daemon=True)
            self._thread.start()

    def stop(self) -> bool:
        """Ask the running sweep to finish its current row and wait up to ``stop_budget_s``.
        Returns True when the thread ended in budget (unreached rows stay leased). Idempotent."""
        with self._lock:
            thread, self._thread = self._thread, None
            self._stop.set()
            if thread is None:
                return True
            thread.join(self.config.stop_budget_s)
            if thread.is_alive():
                log.warning("retention sweep did not drain within %.1f s",
                            self.config.stop_budget_s)
                return False
            return True

    def _loop(self) -> None:
        from qinglong.control.redaction import redact

        failures = 0
        while not self.stop_requested():
            try:
                result = self.run_once()
                failures = 0
                if result.claimed and self.on_sweep is not None:
                    self.on_sweep(result)
            except Exception as exc:  # keep the lifecycle alive; the next sweep retries
                failures += 1
                cause = getattr(exc, "orig", None) or exc  # the driver's error, not the SQL
                log.warning("retention sweep failed (%d in a row): %s: %s", failures,
                            type(cause).__name__, redact(str(cause)))
                log.debug("retention sweep failure", exc_info=True)
            self._stop.wait(self.pause_s(failures))

    def pause_s(self, failures: int) -> float:
        """Seconds between sweeps: ``interval_s``, or after ``failures`` failed sweeps in a
        row (e.g. the database is down) a draw over [c/2, c] with ``c = interval_s *
        2**failures`` capped at ``FAILED_SWEEP_PAUSE_CAP_S`` (never below ``interval_s`` while
        the cap allows it; issue 10 item 6: no mass on the floor)."""
        interval = self.config.interval_s
        if failures <= 0:
            return interval
        cap = max(interval, FAILED_SWEEP_PAUSE_CAP_S)
        return max(interval, retry_delay_s(failures + 1, base_s=interval, cap_s=cap))
