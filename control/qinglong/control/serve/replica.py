"""One control replica: the HTTP API plus its lifecycles (docs/protocols.md §4.5; issue 11 item 8).

Start order: settings checked (bad input exits 2 before anything starts) → engine and S3
client (no connection yet) → lifecycles (readiness, scheduler, lease recovery, enrollment,
retention, occurrence pruning) → the HTTP server. Any number of replicas run at once; none
is a leader. A database that is down at start or lost later (restart, failover) never ends
the process: every lifecycle retries with a jittered backoff capped at 5 s, and ``/readyz``
answers 503 ``database_unavailable`` until a check succeeds again.

Stop (SIGTERM or SIGINT, handled by uvicorn): the server stops accepting, finishes requests
in flight within ``drain_s``, then the lifecycles stop in reverse order, each within its
budget, and the engine's pool closes.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from qinglong.control.serve.lifecycle import PeriodicService, Supervisor

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from qinglong.control.api.context import ApiContext
    from qinglong.control.dispatch.recovery import LeaseRecovery, RecoveryResult
    from qinglong.control.history.prune import PacedPruner
    from qinglong.control.metrics import Metrics

_log = logging.getLogger("qinglong.control.serve")

DEFAULT_PROJECT_ID = "00000000-0000-7000-8000-000000000001"  # one project per deployment
READINESS_PERIOD_S = 2.0
ENROLLMENT_PERIOD_S = 30.0
PRUNE_PERIOD_S = 3600.0
PARTIAL_LOG_SWEEP_PERIOD_S = 60.0
OCCURRENCE_KEEP_DAYS_DEFAULT = 30
LOCK_TIMEOUT_MS = 10_000
SEAL_PERIOD_S = 5.0  # a replica with the keyring seals plaintext left after enable


@dataclass(frozen=True)
class ServeSettings:
    """Checked settings of ``ql3 control serve``. ``database_url``: the runtime login (never
    logged); ``host``/``port``: where the API listens; ``bucket``/``s3_endpoint``: the log
    bucket (credentials from the AWS environment); ``lease_ms``/``heartbeat_ms``: the
    dispatch lease and heartbeat handed to workers (heartbeat ≤ lease/3, C11);
    ``scheduler_tick_ms``: the longest pause between scheduler ticks; ``drain_s``: how long
    requests in flight may take at stop; ``replica_id``: names this replica's retention
    claims; ``max_pushes``: bundle pushes received and checked at once;
    ``default_timezone``: the IANA zone of a new task that names none (None: the zone the
    caller's client sends, else UTC; docs/protocols.md §4.5)."""

    database_url: str
    runtime_role: str
    host: str
    port: int
    bucket: str
    s3_endpoint: str | None
    replica_id: str
    project_id: str = DEFAULT_PROJECT_ID
    lease_ms: int = 30_000
    heartbeat_ms: int = 10_000
    scheduler_tick_ms: int = 500
    recovery_interval_ms: int = 1000
    drain_s: float = 20.0
    max_pushes: int = 2
    occurrence_keep_days: int = OCCURRENCE_KEEP_DAYS_DEFAULT
    default_timezone: str | None = None
    #: the panel's trusted reverse proxies (``--trusted-proxy``; docs/panel.md "Cluster")
    trusted_proxies: tuple[str, ...] = ()


class ReadinessCache:
    """``/readyz``'s answer, computed every ``READINESS_PERIOD_S`` by a lifecycle rather
    than per request (a probe storm never reaches the database). Until the first check, and
    after a check that could not reach the database, the answer is not ready with
    ``database_unavailable``; a lifecycle whose ticks keep failing adds
    ``<name>_failing``. Each change of the readiness check's answer is one line of the
    replica's log (a warning naming the reasons when it becomes not ready, info when ready
    again), so a replica that never becomes ready says why without anyone probing
    ``/readyz``; a failing lifecycle is logged by the lifecycle itself (its failed ticks)."""

    def __init__(self, engine: Engine, runtime_role: str, capabilities: list[Any],
                 supervisor: Supervisor) -> None:
        self._engine = engine
        self._role = runtime_role
        self._capabilities = capabilities
        self._supervisor = supervisor
        self._lock = threading.Lock()
        self._answer: tuple[bool, list[str], list[str]] = (False, ["database_unavailable"], [])
        self._checked = False  # the first answer is logged whatever it is

    def refresh(self) -> None:
        """One check; a database error becomes ``database_unavailable`` (then re-raised so
        the lifecycle backs off)."""
        from qinglong.control.readiness import readiness

        try:
            verdict = readiness(self._engine, runtime_role=self._role,
                                capabilities=self._capabilities, refuse_privileged=True)
        except Exception:
            self._set((False, ["database_unavailable"], []))
            raise
        degraded = [f"{c.name}: {c.reason}" for c in verdict.degraded]
        self._set((verdict.ready, [verdict.reason] if verdict.reason else [], degraded))

    def _set(self, answer: tuple[bool, list[str], list[str]]) -> None:
        with self._lock:
            before, self._answer = self._answer, answer
            first = not self._checked
            self._checked = True
        if answer == before and not first:
            return
        ready, reasons, degraded = answer
        if ready:
            _log.info("ready%s", f" (degraded: {'; '.join(degraded)})" if degraded else "")
        else:  # docs/operations.md §4 says what to do about each reason
            _log.warning("not ready: %s (docs/operations.md §4)", ", ".join(reasons))

    def __call__(self) -> tuple[bool, list[str], list[str]]:
        with self._lock:
            ready, reasons, degraded = self._answer
        failing = [f"{h.name}_failing" for h in self._supervisor.health()
                   if h.failures >= 3 and h.name != "readiness"]
        if failing and ready:
            return False, failing, degraded
        return ready, list(reasons), list(degraded)


class ControlReplica:
    """Wires one replica from ``ServeSettings``; ``run()`` blocks until SIGTERM/SIGINT."""

    def __init__(self, settings: ServeSettings, keyring: Any = None) -> None:
        from qinglong.control.db.engine import create_engine
        from qinglong.control.dispatch.config import DispatchConfig
        from qinglong.control.retention.objects import make_client

        self.settings = settings
        self.keyring = keyring  # secrets.sealing.Keyring or None (secrets/store.py)
        # C11: a heartbeat above a third of the lease is refused here, before anything starts
        self.dispatch = DispatchConfig(lease_ms=settings.lease_ms,
                                       heartbeat_ms=settings.heartbeat_ms)
        self.engine = create_engine(settings.database_url, pool_size=8, max_overflow=8,
                                    lock_timeout_ms=LOCK_TIMEOUT_MS,
                                    application_name=f"ql3-control:{settings.replica_id}"[:60])
        self.s3 = make_client(settings.s3_endpoint, timeout_s=10)
        self.supervisor = Supervisor([])
        self._stoppables: list[Any] = []
        self.ctx = self._context()

    def refuse_privileged_login(self, option: str) -> bool:
        """At start: RuntimeRoleRefusedError (exit 2, ``option`` named) when the database
        answers and the login is, or may act as, a superuser, the schema owner or
        ``pg_write_all_data`` (``roles.refuse_privileged_session``, as ``retention sweep``).
        True when checked; False when the database could not be reached (the replica starts
        anyway and readiness reports ``runtime_login_privileged`` once it connects to such a
        login). Waits at most the engine's connect timeout (10 s unless the URL sets one)."""
        from sqlalchemy.exc import DBAPIError

        from qinglong.control.db.roles import refuse_privileged_session

        try:
            with self.engine.begin() as conn:
                refuse_privileged_session(conn, option)
        except DBAPIError as exc:
            _log.warning("database not reachable at start (%s); readiness checks the login "
                         "once it connects", type(exc).__name__)
            return False
        return True

    def refuse_missing_keyring(self) -> None:
        """At start, once the database answered: SecretsKeyMissingError (a ValidationError
        of ``--secrets-keyring``: exit 2) when sealing is on and this replica holds no
        keyring, or one without the primary key the deployment seals with or a key some
        value is still sealed with (one grouped scan of ``tasks.sealed_env``)."""
        from qinglong.control.secrets.store import (
            SecretsKeyMissingError,
            sealing_state,
            sealing_status,
        )

        with self.engine.begin() as conn:
            state = sealing_state(conn)
        if state is None:
            return
        if self.keyring is None:
            raise SecretsKeyMissingError(
                "secret values are sealed in this deployment (`ql3 control secrets "
                "enable` ran): give this replica the keyring (--secrets-keyring or "
                "QL3_SECRETS_KEYRING; docs/operations.md)")
        if state.primary_key_id not in self.keyring.keys:
            raise SecretsKeyMissingError(
                f"the keyring lacks key {state.primary_key_id}, the primary in use: add "
                "it before rolling (docs/operations.md, rotation)")
        with self.engine.begin() as conn:
            in_use = sealing_status(conn)["sealed_by_key"]
        missing = sorted(set(in_use) - set(self.keyring.keys))
        if missing:
            raise SecretsKeyMissingError(
                f"the keyring lacks key {missing[0]}, which {in_use[missing[0]]} value(s) "
                "are still sealed with: finish `ql3 control secrets rotate-key` before "
                "removing it (docs/operations.md, rotation)")

    def _context(self) -> ApiContext:
        from qinglong.control.api.context import ApiContext
        from qinglong.control.metrics import Metrics

        ctx = ApiContext(engine=self.engine, project_id=self.settings.project_id,
                         lease_ms=self.settings.lease_ms,
                         heartbeat_ms=self.settings.heartbeat_ms, s3=self.s3,
                         bucket=self.settings.bucket, metrics=Metrics(),
                         max_pushes=self.settings.max_pushes,
                         default_timezone=self.settings.default_timezone,
                         panel_trusted_proxies=self.settings.trusted_proxies)
        ctx.extras["dispatch"] = self.dispatch
        ctx.extras["livelog"] = self.livelog = _live_log_hub(self.settings)
        ctx.extras["keyring"] = self.keyring
        return ctx

    def _lifecycles(self) -> None:
        from datetime import UTC, datetime, timedelta

        from qinglong.control import notify
        from qinglong.control.dispatch.recovery import LeaseRecovery, RecoveryConfig
        from qinglong.control.history.orphans import orphan_margin_s, sweep_orphans
        from qinglong.control.history.prune import PacedPruner
        from qinglong.control.retention.claims import process_owner
        from qinglong.control.retention.enrollment import enrollment_sweep
        from qinglong.control.retention.objects import make_client
        from qinglong.control.retention.sweeper import RunAttemptLogRetentionSweeper
        from qinglong.control.scheduling.ledger import prune_occurrences
        from qinglong.control.scheduling.scheduler import Config, Scheduler
        from qinglong.control.serve import store_watch
        from qinglong.control.serve.store_watch import ObjectStoreWatch, object_store_capability

        metrics = self.ctx.metrics
        assert metrics is not None
        pruner = PacedPruner(self.engine, self.settings.replica_id)
        sweeper = RunAttemptLogRetentionSweeper(
            self.engine, self.s3, process_owner(self.settings.replica_id),
            probe_bucket=self.settings.bucket)

        def on_sweep(result: Any) -> None:
            for outcome, n in dict(result.counts).items():
                metrics.retention(str(outcome), int(n))

        sweeper.on_sweep = on_sweep
        watch = ObjectStoreWatch(
            make_client(self.settings.s3_endpoint, timeout_s=store_watch.CHECK_TIMEOUT_S),
            self.settings.bucket, metrics)
        probe = object_store_capability(watch, sweeper)
        cache = ReadinessCache(self.engine, self.settings.runtime_role, [probe],
                               self.supervisor)
        self.ctx.readiness = cache
        scheduler = Scheduler(self.engine, Config(
            tick_period_s=self.settings.scheduler_tick_ms / 1000))
        recovery = LeaseRecovery(self.engine, RecoveryConfig(
            interval_s=self.settings.recovery_interval_ms / 1000))

        def tick_scheduler() -> Any:
            result = scheduler.run_once()
            for outcome, n in result.outcomes.items():
                if outcome in ("run_created", "skipped_active", "skipped_downtime",
                               "backlog_full", "skipped_disabled"):
                    metrics.occurrence(outcome, n)
            return result

        def tick_recovery() -> Any:
            return recovery_tick(recovery, metrics)

        def enroll() -> int:
            with self.engine.connect() as conn:
                return enrollment_sweep(conn, limit=500)

        def sweep_partial() -> int:
            from qinglong.control.livelog.sweep import sweep_partial_logs

            return sweep_partial_logs(self.engine, limit=100)

        def prune() -> int:
            keep = timedelta(days=self.settings.occurrence_keep_days)
            with self.engine.begin() as conn:
                return prune_occurrences(conn, older_than=datetime.now(UTC) - keep,
                                         limit=1000)

        def prune_keys() -> int:
            from qinglong.control.scheduling.run_creation import prune_request_keys

            with self.engine.begin() as conn:
                return prune_request_keys(conn, limit=1000)

        keyring = self.keyring

        def seal() -> Any:
            from qinglong.control.secrets.store import (
                BatchResult,
                seal_batch,
                seal_channels_batch,
                seal_variables_batch,
            )

            with self.engine.begin() as conn:
                tasks = seal_batch(conn, keyring)
            with self.engine.begin() as conn:
                values = seal_variables_batch(conn, keyring)
            with self.engine.begin() as conn:
                urls = seal_channels_batch(conn, keyring)
            return BatchResult(tasks.rows + values.rows + urls.rows,
                               tasks.values + values.values + urls.values,
                               tasks.last_id or values.last_id or urls.last_id)

        if keyring is not None:
            self.supervisor.services.append(PeriodicService(
                "secret_sealing", seal, period_s=SEAL_PERIOD_S,
                more=lambda r: r.last_id is not None))
        self.supervisor.services.extend([
            PeriodicService("readiness", cache.refresh, period_s=READINESS_PERIOD_S),
            PeriodicService("object_store_watch", watch.check,
                            period_s=store_watch.CHECK_PERIOD_S),
            PeriodicService("scheduler", tick_scheduler,
                            period_s=self.settings.scheduler_tick_ms / 1000,
                            more=lambda r: bool(r.page_full)),
            PeriodicService("lease_recovery", tick_recovery,
                            period_s=self.settings.recovery_interval_ms / 1000,
                            more=lambda r: bool(r.full)),
            PeriodicService("enrollment", enroll, period_s=ENROLLMENT_PERIOD_S),
            PeriodicService("occurrence_prune", prune, period_s=PRUNE_PERIOD_S),
            # run now's Idempotency-Key rows past their 24 h (docs/protocols.md §4.5)
            PeriodicService("run_request_key_prune", prune_keys, period_s=PRUNE_PERIOD_S,
                            more=lambda n: n >= 1000),
            PeriodicService("partial_log_sweep", sweep_partial,
                            period_s=PARTIAL_LOG_SWEEP_PERIOD_S, more=lambda n: n >= 100),
            PeriodicService("notify", lambda: notify.tick(self.engine, keyring),
                            period_s=1.0,
                            more=lambda n: n >= notify.BATCH),
            history_prune_service(pruner),
            # docs/operations.md "Orphan log objects": the retention sweeper's store (probed)
            PeriodicService("orphan_sweep", lambda: sweep_orphans(
                self.engine, sweeper.store, self.s3, self.settings.bucket,
                str(process_owner(self.settings.replica_id)),
                margin_s=orphan_margin_s(self.dispatch)), period_s=PRUNE_PERIOD_S,
                more=lambda r: r.walked >= 50 and r.stopped is None),
        ])
        sweep_sessions = _panel_session_sweep(self.engine)
        if sweep_sessions is not None:  # docs/panel.md "Cluster": expired panel sessions
            self.supervisor.services.append(PeriodicService(
                "panel_session_sweep", sweep_sessions, period_s=PRUNE_PERIOD_S))
        self._stoppables.extend([sweeper, pruner])
        self._sweeper = sweeper

    def run(self) -> None:
        """Serve until SIGTERM/SIGINT, then drain (module docstring)."""
        import uvicorn

        from qinglong.control.api.app import build_app

        self._lifecycles()
        app = build_app(self.ctx)
        # http and loop "auto": httptools and uvloop (the [control] extra) when importable,
        # else h11 and asyncio's own loop
        config = uvicorn.Config(app, host=self.settings.host, port=self.settings.port,
                                log_level="warning", access_log=False,
                                timeout_graceful_shutdown=int(self.settings.drain_s),
                                lifespan="off",
                                # X-Forwarded-* are the panel's to read, and only from
                                # --trusted-proxy peers (qinglong.panel.proxies)
                                proxy_headers=False)
        hub = self.livelog

        class _Server(uvicorn.Server):
            def handle_exit(self, sig: int, frame: Any) -> None:
                hub.draining.set()  # live-log streams end now, with a retry: hint
                hub.wakeups.wake_all()
                super().handle_exit(sig, frame)

        server = _Server(config)
        _stop_server_on_signals(server, hub.draining)
        self.livelog.wakeups.start()
        self.supervisor.start()
        self._sweeper.start()
        _log.info("control replica %s listening on http://%s:%d", self.settings.replica_id,
                  self.settings.host, self.settings.port)
        try:
            server.run()
        finally:
            drained = self.stop()
            _log.info("control replica %s stopped (lifecycles drained: %s)",
                      self.settings.replica_id, "yes" if drained else "no, budget exceeded")

    def stop(self) -> bool:
        """Stop the lifecycles and close the pool; True when all ended within budget.
        Idempotent. The retention sweeper is asked to stop before the lifecycles are
        waited for, so its sweep in flight winds down meanwhile."""
        self.livelog.draining.set()
        self.livelog.wakeups.stop()
        for item in self._stoppables:
            if hasattr(item, "request_stop"):
                item.request_stop()
        ok = self.supervisor.stop()
        for item in reversed(self._stoppables):
            ok = bool(item.stop()) and ok
        self._stoppables.clear()
        self.engine.dispose()
        return ok


def history_prune_service(pruner: PacedPruner, *,
                          period_s: float = PRUNE_PERIOD_S) -> PeriodicService:
    """The ``history_prune`` lifecycle (docs/operations.md "History pruning"): every
    ``period_s`` seconds one ``PacedPruner.run_pass`` (a ``PacedPruner``), which prunes
    until nothing more is due at the pruner's duty cycle; no cap on batches per pass, so a
    backlog of any size clears in one pass. The stop budget covers one batch and its rest
    (``request_stop`` ends a rest at once)."""
    return PeriodicService("history_prune", pruner.run_pass, period_s=period_s)


def _panel_session_sweep(engine: Any) -> Any:
    """The panel's session sweep (``PanelSessionStore.sweep``), or None when the panel
    (``qinglong-panel``) is not installed."""
    try:
        from qinglong.control.panel_sessions import PanelSessionStore
    except ImportError:
        return None
    return PanelSessionStore(engine).sweep


def recovery_tick(recovery: LeaseRecovery, metrics: Metrics) -> RecoveryResult:
    """One lease-recovery batch; its lost attempts counted by reason (``not_started``,
    ``lost``) in ``ql3_leases_lost_total``."""
    result = recovery.run_once()
    for reason, n in sorted(result.reasons.items()):
        metrics.lease_lost(reason, n)
    return result


def _live_log_hub(settings: ServeSettings) -> Any:
    """The replica's live-log hub with its dedicated LISTEN session (docs/protocols.md §4.9
    "Wake-ups"): a psycopg connection of its own, never one of the pool's."""
    from qinglong.control.livelog.hub import LiveLogHub
    from qinglong.control.livelog.wakeups import LogWakeups

    def connect() -> Any:
        import psycopg

        return psycopg.connect(settings.database_url, autocommit=True, connect_timeout=10,
                               application_name=f"ql3-listen:{settings.replica_id}"[:60])

    return LiveLogHub(wakeups=LogWakeups(connect))


def _stop_server_on_signals(server: Any, draining: Any = None) -> None:
    """SIGTERM and SIGINT ask ``server`` to stop, before and after it serves.

    uvicorn (0.29+) handles both while it serves, then restores the handlers it found and
    raises the captured signal again. With the default handlers in place that second
    SIGTERM killed the process (exit -15) before ``run``'s ``finally`` could drain the
    lifecycles, and SIGINT became a KeyboardInterrupt (exit 1). Found here, the handler
    only asks the server to stop: the process drains and exits 0; a signal that comes
    before the server starts makes it stop as soon as it has started."""
    import signal

    def request_stop(_sig: int, _frame: Any) -> None:
        server.should_exit = True
        if draining is not None:  # live-log streams end with a retry: hint
            draining.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
