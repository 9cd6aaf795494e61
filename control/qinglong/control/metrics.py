"""Prometheus metrics of one control process (docs/protocols.md §4.5 ``/metrics``; issue 11 item 7).

A ``Metrics`` owns its own ``CollectorRegistry`` (never the process-global one), so two apps
in one test process never share counts. The lifecycles count through its small methods:

- ``claimed(n)``: attempts handed to workers by claims (``ql3_claims_total``);
- ``lease_lost(reason)``: leases lost, by reason (``ql3_leases_lost_total{reason}``):
  ``not_started`` and ``lost`` count attempts lease recovery moved to ``lost`` (the reason it
  recorded: the worker never reported the start, or it had); ``fenced`` counts worker writes
  refused with 409 ``lease_lost`` (the worker then kills that attempt);
- ``occurrence(outcome, n)``: scheduler slots by ledger outcome (``run_created``,
  ``skipped_active``, ...) (``ql3_occurrences_total{outcome}``);
- ``retention(outcome_class, n)``: retention sweep results by outcome or failure class
  (``deleted``, ``already_absent``, ``artifact_unavailable``, ...)
  (``ql3_retention_outcomes_total{class}``);
- ``log_unavailable()``: attempts completed with reason ``log_unavailable`` (their log could
  not be stored; the live chunks are their partial log) (``ql3_attempts_log_unavailable_total``);
- ``object_store_available(bool)``: the replica's last bucket check, 1 or 0
  (``ql3_object_store_available``; ``serve/store_watch.py``);
- ``claim_waiting(delta)`` and ``claim_wait_slept(ended)``: claims waiting for work now
  (``ql3_claims_waiting``) and each sleep of a waiting claim by how it ended — ``woken``
  (a wake-up: a NOTIFY, a listener reconnect, a run made here), ``timer`` (its wait or the
  next ``not_before`` came), ``draining`` (``ql3_claim_wait_sleeps_total{ended}``;
  docs/protocols.md §4.2 "Claims that wait");
- ``observe_request(method, route, status, seconds)``: the API middleware's request latency,
  labelled by route *template* (``/v1/runs/{run_id}``), never the raw path
  (``ql3_http_request_duration_seconds``).

Every method accepts only short label values chosen by our code; a caller never passes user
input as a label (unbounded cardinality). Thread-safe (prometheus-client's own locking).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client import exposition as _exposition

CONTENT_TYPE = _exposition.CONTENT_TYPE_LATEST
_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class Metrics:
    """The process's counters and histogram on a private ``registry``."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._claims = Counter("ql3_claims", "Attempts handed to workers by claims.",
                               registry=self.registry)
        self._leases_lost = Counter("ql3_leases_lost",
                                    "Leases lost: recovered (by reason) or fenced writes.",
                                    ["reason"], registry=self.registry)
        self._occurrences = Counter("ql3_occurrences", "Scheduler slots by ledger outcome.",
                                    ["outcome"], registry=self.registry)
        self._retention = Counter("ql3_retention_outcomes",
                                  "Retention sweep results by outcome or failure class.",
                                  ["class"], registry=self.registry)
        self._log_unavailable = Counter(
            "ql3_attempts_log_unavailable",
            "Attempts completed with reason log_unavailable (log not stored).",
            registry=self.registry)
        self._store_available = Gauge(
            "ql3_object_store_available",
            "1 when this replica's last check of the log bucket answered, else 0.",
            registry=self.registry)
        self._store_available.set(1)
        self._claims_waiting = Gauge("ql3_claims_waiting",
                                     "Claims waiting for work on this replica now.",
                                     registry=self.registry)
        self._claim_sleeps = Counter("ql3_claim_wait_sleeps",
                                     "Sleeps of waiting claims, by how each ended.",
                                     ["ended"], registry=self.registry)
        self._latency = Histogram("ql3_http_request_duration_seconds",
                                  "API request latency by route template.",
                                  ["method", "route", "status"], buckets=_LATENCY_BUCKETS,
                                  registry=self.registry)

    def claimed(self, n: int = 1) -> None:
        """Count ``n`` (≥ 0) attempts handed out by one claim."""
        if n > 0:
            self._claims.inc(n)

    def lease_lost(self, reason: str, n: int = 1) -> None:
        """Count ``n`` leases lost with ``reason`` (``not_started``, ``lost``, ``fenced``)."""
        if n > 0:
            self._leases_lost.labels(reason=reason).inc(n)

    def occurrence(self, outcome: str, n: int = 1) -> None:
        """Count ``n`` slots with ledger ``outcome`` (the occurrences table's values)."""
        if n > 0:
            self._occurrences.labels(outcome=outcome).inc(n)

    def retention(self, outcome_class: str, n: int = 1) -> None:
        """Count ``n`` retention results of ``outcome_class`` (outcome or failure class)."""
        if n > 0:
            self._retention.labels(**{"class": outcome_class}).inc(n)

    def log_unavailable(self) -> None:
        """Count one attempt completed with reason ``log_unavailable``."""
        self._log_unavailable.inc()

    def object_store_available(self, available: bool) -> None:
        """Set the bucket gauge from the last check (``serve/store_watch.py``)."""
        self._store_available.set(1 if available else 0)

    def claim_waiting(self, delta: int) -> None:
        """Move the gauge of waiting claims by ``delta`` (+1 when a wait begins, -1 at
        its end)."""
        self._claims_waiting.inc(delta)

    def claim_wait_slept(self, ended: str) -> None:
        """Count one sleep of a waiting claim that ended ``woken``, ``timer`` or
        ``draining``."""
        self._claim_sleeps.labels(ended=ended).inc()

    def observe_request(self, method: str, route: str, status: int, seconds: float) -> None:
        """Record one request's latency (seconds) under its route template."""
        self._latency.labels(method=method, route=route, status=str(status)).observe(seconds)

    def exposition(self) -> bytes:
        """The registry in Prometheus text format (``CONTENT_TYPE``)."""
        return generate_latest(self.registry)
