"""Claims: lease up to N queued runs to one worker incarnation (docs/protocols.md §4.2, dispatch).

One READ COMMITTED transaction, three steps:

1. ``pick_runs``: lock due queued runs whose task labels are within the incarnation's (and
   its pool's) labels, ``FOR UPDATE SKIP LOCKED`` inside a MATERIALIZED CTE (docs/protocols.md §4.3
   step 1: a plain ``IN (subquery LIMIT n)`` can lock more than n rows), so concurrent
   claimers never wait for, nor double-claim, a run.
2. ``lock_replace_tasks``: for tasks with concurrency policy ``replace``, lock the task row
   (SKIP LOCKED): at most one claimer at a time decides for such a task.
3. ``claim_run`` per run (a fresh snapshot each): re-check ``queued`` and, for ``replace``,
   that no other run of the task is dispatching or running (this also keeps a batch to one
   run per such task); insert the attempt with a new lease — random token, version 1, expiry
   ``now() + lease`` on the database clock — move the run to ``dispatching``; both events.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from qinglong.control.db.engine import run_named
from qinglong.control.db.variables import pool_environment, pool_secret_names
from qinglong.control.dispatch.config import DispatchConfig
from qinglong.control.dispatch.errors import UnknownIncarnationError
from qinglong.control.dispatch.secret_env import secret_names
from qinglong.control.dispatch.statements import sql
from qinglong.control.secrets.store import opened_env
from qinglong.shared.ids import uuid7
from qinglong.shared.wire import ClaimAnswer, ClaimedAttempt, ClaimRequest, LeaseRef

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from qinglong.control.db.engine import Transactions
    from qinglong.control.secrets.sealing import Keyring


def flatten_env(env: Mapping[str, Any] | None) -> dict[str, str]:
    """``{"NAME": {"value": "v", "secret": bool}}`` (tasks.env) -> ``{"NAME": "v"}``; a plain
    string value (older rows) is taken as is, anything else is dropped."""
    out: dict[str, str] = {}
    for name, spec in (env or {}).items():
        value = spec.get("value") if isinstance(spec, Mapping) else spec
        if isinstance(value, str):
            out[str(name)] = value
    return out


def claim_attempts(engine: Transactions, config: DispatchConfig, *, pool_id: str,
                   request: ClaimRequest, keyring: Keyring | None = None) -> ClaimAnswer:
    """Lease at most ``min(request.max_attempts, config.max_claim)`` attempts to
    ``request.incarnation_id`` (an incarnation of ``pool_id``, not stopped), in one
    transaction; each ClaimedAttempt carries its lease and the lease/heartbeat timing.

    Each attempt's env is the global variables in ``pool_id``'s scope
    (:func:`~qinglong.control.db.variables.pool_environment`) with the task's own env over
    them. Raises UnknownIncarnationError (nothing changed) when the incarnation is unknown,
    stopped or of another pool. Sealed secret values are opened with ``keyring`` for the
    attempts handed out only (secrets/store.py); SecretsKeyMissingError (nothing changed)
    when some are sealed and ``keyring`` is None. An empty answer means nothing was due or
    matched.
    """
    limit = min(request.max_attempts, config.max_claim)
    with engine.begin() as conn:
        params = {"id": request.incarnation_id, "pool_id": pool_id}
        if run_named(conn, sql("touch_incarnation"), params).first() is None:
            raise UnknownIncarnationError("no such live incarnation in this pool")
        run_named(conn, sql("pick_runs_plan"))  # bounded without statistics (§4.3)
        picked = run_named(conn, sql("pick_runs"), {
            "incarnation_id": request.incarnation_id, "pool_id": pool_id,
            "limit": limit}).mappings().all()
        replace = sorted({r["task_id"] for r in picked if r["concurrency_policy"] == "replace"})
        held: set[str] = set()
        if replace:
            held = {r["task_id"] for r in run_named(
                conn, sql("lock_replace_tasks"), {"task_ids": replace}).mappings()}
        claimed = []
        shared_env = pool_environment(conn, pool_id=pool_id, keyring=keyring) if picked else {}
        shared_secrets = pool_secret_names(conn, pool_id=pool_id) if picked else set()
        for row in picked:
            if row["concurrency_policy"] == "replace" and row["task_id"] not in held:
                continue  # another claimer decides for this task right now
            attempt = _claim_one(conn, config, row["run_id"], request.incarnation_id,
                                 keyring, shared_env, shared_secrets)
            if attempt is not None:
                claimed.append(attempt)
    return ClaimAnswer(claimed)


def _claim_one(conn: Connection, config: DispatchConfig, run_id: str,
               incarnation_id: str, keyring: Keyring | None,
               shared_env: Mapping[str, str],
               shared_secrets: set[str]) -> ClaimedAttempt | None:
    row = run_named(conn, sql("claim_run"), {
        "run_id": run_id, "attempt_id": uuid7(), "incarnation_id": incarnation_id,
        "lease_s": config.lease_ms / 1000.0, "run_event_id": uuid7(),
        "attempt_event_id": uuid7()}).mappings().first()
    if row is None:
        return None
    timeout_s = row["timeout_s"]
    opened = opened_env(keyring, row["task_id"], row["env"] or {}, row["sealed_env"])
    return ClaimedAttempt(
        lease=LeaseRef(row["attempt_id"], row["lease_token"], int(row["lease_version"])),
        run_id=row["run_id"], task_id=row["task_id"], task_name=row["name"],
        run_number=int(row["run_number"]), attempt_number=int(row["attempt_number"]),
        argv=list(row["argv"]) if row["argv"] is not None else None, shell=row["shell"],
        env={**shared_env, **flatten_env(opened)}, secret_names=_masked(opened, shared_secrets),
        cwd=row["cwd"],
        timeout_ms=int(timeout_s) * 1000 if timeout_s is not None else None,
        log_limit_bytes=int(row["log_limit_bytes"]), lease_ms=config.lease_ms,
        heartbeat_ms=config.heartbeat_ms, bundle_digest=row["bundle_digest"],
        entry_point=row["entry_point"])


def _masked(opened: Mapping[str, Any], shared_secrets: set[str]) -> list[str]:
    """The names whose values the worker masks: the task's secret variables, and the pool's
    secret global variables the task's own env does not override (docs/operations.md §9)."""
    return sorted(set(secret_names(opened)) | (shared_secrets - set(opened)))
