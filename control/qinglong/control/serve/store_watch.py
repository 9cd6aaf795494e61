"""The log bucket's availability as one replica sees it (docs/protocols.md §4.5 ``/readyz``;
docs/operations.md §4).

A lifecycle checks the bucket every ``CHECK_PERIOD_S`` (10 s) with one ``HeadBucket`` on a
client of its own (one attempt, ``CHECK_TIMEOUT_S`` connect and read timeouts), so an
outage shows within ``CHECK_PERIOD_S + CHECK_TIMEOUT_S`` plus one readiness refresh (under
30 s) — the retention sweeper's probe runs every few minutes only. An unavailable store is
**degraded** (``object_store_unavailable`` in ``/readyz``'s body,
``ql3_object_store_available`` 0), never a readiness failure: failing readiness for it
would take every replica out of the Service and make every worker self-fence, while claims,
heartbeats and the database-backed API go on working. Only database and schema reasons
fail readiness.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from qinglong.control.readiness import CapabilityStatus

CHECK_PERIOD_S = 10.0
CHECK_TIMEOUT_S = 5.0
_log = logging.getLogger(__name__)


class ObjectStoreWatch:
    """``check()`` (a lifecycle tick) records whether ``HeadBucket`` on ``bucket`` answered;
    ``available`` the last result (True before the first check); ``metrics`` (a
    ``Metrics``, optional) gets the gauge. Thread-safe; ``check`` never raises."""

    def __init__(self, client: Any, bucket: str, metrics: Any = None) -> None:
        self._client = client
        self._bucket = bucket
        self._metrics = metrics
        self._lock = threading.Lock()
        self.available = True
        self.detail: str | None = None

    def check(self) -> bool:
        """One ``HeadBucket``; True when it answered 2xx. Any error (refused, timeout,
        5xx, 403, 404) is unavailable, named by its class only (never a URL or a key)."""
        try:
            self._client.head_bucket(Bucket=self._bucket)
            ok, detail = True, None
        except Exception as exc:  # botocore raises many classes; all mean "cannot store"
            ok, detail = False, type(exc).__name__
        with self._lock:
            changed = ok != self.available
            self.available, self.detail = ok, detail
        if changed:
            if ok:
                _log.info("object store available again")
            else:
                _log.warning("object store unavailable (%s): logs cannot be stored; the "
                             "replica stays ready", detail)
        if self._metrics is not None:
            self._metrics.object_store_available(ok)
        return ok


def object_store_capability(watch: ObjectStoreWatch, sweeper: Any) -> Any:
    """The ``object_store`` capability for readiness: degraded ``object_store_unavailable``
    when the watch's last check failed or the retention sweeper's last probe found the
    store unavailable, degraded ``object_store_unsafe`` when the probe found it unsafe,
    else ok. Never ``unavailable`` (it would fail readiness); never raises."""

    def probe() -> CapabilityStatus:
        verdict = getattr(sweeper, "verdict", None)
        if not watch.available:
            return CapabilityStatus("object_store", "degraded", "object_store_unavailable",
                                    watch.detail)
        if verdict is not None and verdict.status == "unavailable":
            return CapabilityStatus("object_store", "degraded", "object_store_unavailable",
                                    verdict.reason)
        if verdict is not None and verdict.status == "unsafe":
            return CapabilityStatus("object_store", "degraded", "object_store_unsafe",
                                    verdict.reason)
        return CapabilityStatus("object_store", "ok")

    return probe
