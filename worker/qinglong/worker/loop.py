"""The worker's main loop (docs/protocols.md §4.2 "Dispatch"): register a new
incarnation, claim up to the free slots, run each attempt, drain on stop.

A registration is a new incarnation per process start (a restarted worker under the
same name inherits nothing). Claims wait at control for work (``QL3-Claim-Wait``:
min(25 s, lease/3), docs/protocols.md §4.2 "Claims that wait"); when control answered that
it waited, the next claim goes out at once, else (an older control, a draining replica, an
error) an empty claim backs off 0.5–2 s with jitter. A stop requested while a claim waits
takes effect when it returns (at most the wait). A claimed attempt
whose heartbeat breaks heartbeat ≤ lease/3 is refused and not run. An attempt whose
command has ended and whose log is still being stored does not hold a ``--concurrency`` slot
(at most 2 × concurrency of them are held). Stop (SIGTERM/SIGINT)
drains: no more claims, running attempts get ``drain_budget_s``, then their groups are stopped
and they complete ``failed`` with reason ``worker_drain`` (retried when the task allows);
then ``stopped`` is sent.

A 401 from control on any call (the worker token was revoked, or is unknown to control) ends
the worker: no more claims, running attempts are stopped at once (grace, then KILL: they
could not be reported anyway), one error line says so and ``run()`` returns 1.
"""

from __future__ import annotations

import logging
import random
import threading
from dataclasses import dataclass, field

from qinglong.shared import wire
from qinglong.worker import clock
from qinglong.worker.attempt import AttemptRunner, RunnerConfig
from qinglong.worker.client import ControlClient
from qinglong.worker.errors import ControlAuthError, ControlUnavailableError, WorkerError

log = logging.getLogger("qinglong.worker")
REGISTER_TRY_S = 2.0  # one log line per failed try: keep it short
REGISTER_BACKOFF_MAX_S = 30.0
# one claim's retries: short, so a stop is honoured soon even while control is unreachable
# (a claim applied whose answer never came back is recovered as not_started after its lease)
CLAIM_BUDGET_S = 5.0
STOPPED_REPORT_S = 3.0  # the farewell is best effort: recovery never needs it
IDLE_MIN_S, IDLE_MAX_S = 0.5, 2.0
DRAIN_REPORT_S = 60.0  # after the drain budget: stop (grace), upload, complete
REFUSED_LINE = "the worker token was refused (401): revoked or unknown; stopping"


@dataclass(frozen=True)
class WorkerConfig:
    """``name`` (reusable, e.g. the host name), ``labels`` declared to control, ``concurrency``
    attempts at once (1–64), ``drain_budget_s`` seconds running attempts get after a stop
    request, ``runner`` the per-attempt settings, ``control_url`` for log lines only."""

    name: str
    labels: dict[str, str]
    concurrency: int
    drain_budget_s: float
    runner: RunnerConfig
    control_url: str = ""
    idle_s: tuple[float, float] = field(default=(IDLE_MIN_S, IDLE_MAX_S))


class WorkerLoop:
    """Runs the worker until ``request_stop()``; ``run()`` returns the process exit code.

    Fatal errors (ControlAuthError, ControlRejectedError, WireAnswerError at registration)
    propagate from ``run()`` before any attempt is claimed. A 401 afterwards (the client's
    ``token_refused``) stops the worker with exit code 1.
    """

    def __init__(self, client: ControlClient, config: WorkerConfig) -> None:
        self._client = client
        self._config = config
        self._stop = threading.Event()
        self._changed = threading.Condition()
        self._running: dict[str, AttemptRunner] = {}
        self.incarnation_id: str | None = None

    def request_stop(self) -> None:
        """Begin the drain (idempotent; safe from a signal handler)."""
        self._stop.set()

    def running_ids(self) -> list[str]:
        """Attempt ids currently running."""
        with self._changed:
            return list(self._running)

    def run(self) -> int:
        """Register, claim and run until stopped, then drain; 0 on a clean drain, 1 when
        control refused the token (401) after registration."""
        registered = self._register()
        if registered is None:
            return 0
        self.incarnation_id = registered.incarnation_id
        log.info("registered as %s (incarnation %s; lease %d ms, heartbeat %d ms)",
                 self._config.name, registered.incarnation_id, registered.lease_ms,
                 registered.heartbeat_ms)
        refused = self._client.token_refused
        while not self._stop.is_set() and not refused.is_set():
            free = self._free_slots()
            if free <= 0:
                with self._changed:
                    self._changed.wait(0.5)
                continue
            wait_ms = min(wire.CLAIM_WAIT_MAX_MS, registered.lease_ms // 3)
            if not self._claim_once(registered.incarnation_id, free, wait_ms) \
                    and not refused.is_set():
                self._stop.wait(random.uniform(*self._config.idle_s))  # noqa: S311 jitter
        if refused.is_set():
            log.error(REFUSED_LINE)
            self._stop_all("worker_token_refused")
            log.info("worker stopped")
            return 1
        self._drain()
        try:
            self._client.stopped(wire.WorkerStopped(incarnation_id=registered.incarnation_id),
                                 deadline=clock.now() + STOPPED_REPORT_S)
        except WorkerError as exc:
            log.warning("stopped not reported: %s", exc)
        log.info("worker stopped")
        return 0

    def _register(self) -> wire.WorkerRegistered | None:
        msg = wire.WorkerRegistration(name=self._config.name, labels=self._config.labels,
                                      concurrency=self._config.concurrency)
        delay = 0.5
        while not self._stop.is_set():
            try:
                return self._client.register(msg, deadline=clock.now() + REGISTER_TRY_S)
            except ControlUnavailableError as exc:
                log.warning("control at %s unreachable (%s); retrying registration in %.1f s",
                            self._config.control_url or self._client.current_url, exc.cause,
                            delay)
                self._stop.wait(delay * random.uniform(0.8, 1.2))  # noqa: S311 jitter
                delay = min(REGISTER_BACKOFF_MAX_S, delay * 2)
        return None

    def _free_slots(self) -> int:
        """Attempts that may be claimed now: ``concurrency`` minus the attempts whose command
        still runs; an attempt whose command has ended and whose log is being stored (the
        object store may be down for minutes) does not count, but at most
        2 × ``concurrency`` such attempts are held (then nothing is claimed)."""
        with self._changed:
            runners = list(self._running.values())
        storing = sum(1 for r in runners if r.storing.is_set())
        if storing >= 2 * self._config.concurrency:
            return 0
        return self._config.concurrency - (len(runners) - storing)

    def _claim_once(self, incarnation_id: str, free: int, wait_ms: int) -> bool:
        """One claim call, letting control wait up to ``wait_ms`` for work (0: answer at
        once); True when an attempt started or control waited (claim again at once)."""
        began = clock.now()
        answered = [began]  # the answered request's send time, a retry's when it was retried:
        # the first renewal of every lease in this answer. A lease granted later in the wait
        # ends later than the fence counts (the safe side); counting from the first try
        # instead would fence a lease granted seconds later, after a retry, at once
        try:
            attempts, refused, waited = self._client.claim_waiting(
                wire.ClaimRequest(incarnation_id=incarnation_id,
                                  max_attempts=min(free, wire.MAX_CLAIM)),
                deadline=began + CLAIM_BUDGET_S + wait_ms / 1000, wait_ms=wait_ms,
                sent_at=answered)
        except ControlAuthError as exc:
            if exc.status != 401:
                log.warning("claim failed: %s", exc)
            return False  # a 401 set the client's token_refused: run() stops
        except WorkerError as exc:
            log.warning("claim failed: %s", exc)
            return False
        for reason in refused:
            log.error("claimed attempt refused, not run: %s", reason)
        for attempt in attempts:
            runner = AttemptRunner(self._client, attempt, answered[0], self._config.runner,
                                   self._finished)
            with self._changed:
                self._running[runner.attempt_id] = runner
            log.info("%s: starting", runner.who)
            runner.start()
        return bool(attempts) or waited

    def _finished(self, attempt_id: str) -> None:
        with self._changed:
            self._running.pop(attempt_id, None)
            self._changed.notify_all()

    def _drain(self) -> None:
        with self._changed:
            runners = list(self._running.values())
        if runners:
            log.info("draining %d attempt(s) for up to %.1f s", len(runners),
                     self._config.drain_budget_s)
        deadline = clock.now() + self._config.drain_budget_s
        for runner in runners:
            runner.join(max(0.0, deadline - clock.now()))
        late = [r for r in runners if not r.join(0)]
        for runner in late:
            runner.request_stop("worker_drain")
        for runner in late:
            runner.join(self._config.runner.grace_s + DRAIN_REPORT_S)

    def _stop_all(self, reason: str) -> None:
        """Stop every running attempt now (TERM, grace, KILL) and wait for the runners."""
        with self._changed:
            runners = list(self._running.values())
        for runner in runners:
            runner.request_stop(reason)
        for runner in runners:
            runner.join(self._config.runner.grace_s + DRAIN_REPORT_S)
