"""Readiness of the control plane's PostgreSQL authority (docs/protocols.md §4.1, §4.5 ``/readyz``).

Answers ready, or one named reason: ``migration_pending`` (ledger behind the code),
``migration_checksum_mismatch`` (a recorded file differs from ours), ``schema_newer_than_code``
(a non-additive migration we do not know), ``runtime_role_invalid`` (grants not exactly the
reviewed set; a schema ahead by additive migrations may also hold a newer release's extra
grants, ``roles.runtime_role_problems``), ``runtime_login_privileged`` (asked by ``serve``
only: the session's login is, or is a member of, a superuser, the schema owner or
``pg_write_all_data``), or the reason of an injected capability probe that is
``unavailable`` (e.g. ``object_store_unavailable``).
Degraded capabilities (e.g. ``object_store_unsafe``) are listed and do not fail readiness.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from qinglong.control.db.migrations import compare_ledger, load_migration_files, read_ledger
from qinglong.control.db.roles import (
    DEFAULT_RUNTIME_ROLE,
    refuse_privileged_session,
    runtime_role_problems,
)
from qinglong.control.errors import (
    MigrationChecksumError,
    RuntimeRoleRefusedError,
    SchemaNewerThanCodeError,
)

if TYPE_CHECKING:
    from sqlalchemy import Connection, Engine


@dataclass(frozen=True, slots=True)
class CapabilityStatus:
    """One capability's state; ``reason`` names why it is degraded or unavailable (a stable
    code), ``detail`` says what was seen (short, secret-free)."""

    name: str
    state: Literal["ok", "degraded", "unavailable"]
    reason: str | None = None
    detail: str | None = None


CapabilityProbe = Callable[[], CapabilityStatus]


@dataclass(frozen=True, slots=True)
class Readiness:
    """``ready`` with ``reason`` None, or not ready with a named reason and a ``detail``."""

    ready: bool
    reason: str | None = None
    detail: str | None = None
    degraded: tuple[CapabilityStatus, ...] = field(default=())
    ahead: tuple[str, ...] = field(default=())

    def to_json(self) -> dict[str, Any]:
        """JSON shape of ``ql3 control readiness --json`` and ``/readyz``."""
        return {
            "ready": self.ready, "reason": self.reason, "detail": self.detail,
            "degraded": [{"capability": c.name, "reason": c.reason, "detail": c.detail}
                         for c in self.degraded],
            "schema_ahead_by": list(self.ahead),
        }


MAX_PROBLEMS_SHOWN = 5


def schema_readiness(conn: Connection) -> Readiness:
    """The ledger part of readiness alone: ready (with ``ahead``), or ``migration_pending``,
    ``migration_checksum_mismatch`` or ``schema_newer_than_code``. Reads the ledger only, in
    the caller's transaction on ``conn`` (an SQLAlchemy Connection); the runtime-role check
    is not made. Commands that use the schema (``retention sweep``) call it before their
    first claim."""
    files = load_migration_files()
    ledger = read_ledger(conn)
    if ledger is None or len(ledger) < len(files):
        done = 0 if ledger is None else len(ledger)
        return Readiness(False, "migration_pending", f"{done} of {len(files)} applied")
    try:
        ahead = compare_ledger(files, ledger)
    except MigrationChecksumError as exc:
        return Readiness(False, "migration_checksum_mismatch", str(exc))
    except SchemaNewerThanCodeError as exc:
        return Readiness(False, "schema_newer_than_code", str(exc))
    return Readiness(True, ahead=ahead)


def readiness(
    engine: Engine,
    *,
    runtime_role: str = DEFAULT_RUNTIME_ROLE,
    capabilities: Sequence[CapabilityProbe] = (),
    refuse_privileged: bool = False,
) -> Readiness:
    """Check (with ``refuse_privileged``) the session's login first, then ledger, runtime
    grants, then each capability probe, in that order.

    ``refuse_privileged`` is what a control replica asks: a login that could act beyond the
    runtime role (``roles.refuse_privileged_session``) is ``runtime_login_privileged``, so a
    replica given the owner's credentials never reports ready. ``ql3 control readiness``
    leaves it off (it may be run as the owner).

    The first failing check names the reason. Probes must not raise: a probe reports its
    own failure as ``unavailable`` (reason defaults to ``<name>_unavailable``). ``engine``
    (``db/engine.py``) may connect as any role that can read the catalog and the ledger; the
    database checks run in one short transaction and its connection is back in the pool
    before any probe runs. Database errors (``sqlalchemy.exc.DBAPIError``) pass through.
    """
    with engine.begin() as conn:
        if refuse_privileged:
            try:
                refuse_privileged_session(conn, "login")
            except RuntimeRoleRefusedError as exc:
                return Readiness(False, "runtime_login_privileged", str(exc).split(";")[0])
        schema = schema_readiness(conn)
        if not schema.ready:
            return schema
        ahead = schema.ahead
        problems = runtime_role_problems(conn, runtime_role, schema_ahead=bool(ahead))
        if problems and not ahead:
            # each statement reads the latest commit (READ COMMITTED): a release N+1 migrate
            # that committed between the ledger read and the grants read gives grants ahead
            # of the ledger as read; read the ledger again before calling them invalid
            again = schema_readiness(conn)
            if again.ready and again.ahead:
                ahead = again.ahead
                problems = runtime_role_problems(conn, runtime_role, schema_ahead=True)
    if problems:
        shown = "; ".join(problems[:MAX_PROBLEMS_SHOWN])
        more = len(problems) - MAX_PROBLEMS_SHOWN
        return Readiness(False, "runtime_role_invalid",
                         shown + (f"; and {more} more" if more > 0 else ""), ahead=ahead)
    degraded: list[CapabilityStatus] = []
    for probe in capabilities:
        status = probe()
        if status.state == "unavailable":
            return Readiness(False, status.reason or f"{status.name}_unavailable",
                             f"{status.name}: {status.detail}" if status.detail
                             else status.name, tuple(degraded), ahead)
        if status.state == "degraded":
            degraded.append(status)
    return Readiness(True, degraded=tuple(degraded), ahead=ahead)
