"""Global variables of the cluster (migration 0009, docs/protocols.md §4.5 "Global variables").

A variable ``NAME`` has a pool scope (None: every pool), a secret flag and ordered values,
each with a remark and an enabled flag. A claim answer gets, for the claiming pool, each
variable in scope as the enabled values joined with ``&`` in position order
(:func:`pool_environment`); a variable with no enabled value is left out. Values leave this
module only through :func:`pool_environment`: :func:`list_variables` returns names, scopes,
remarks and flags. No error message here contains a value.

Limits (``execve``'s, ``shared/variable_limits.py``): one value and one joined variable at
most 128 KiB, every variable of one pool's scope together at most 1 MiB
(:data:`ENV_MAX_BYTES`), checked inside the writing transaction (a refused write changes
nothing).

Once sealing is on (``ql3 control secrets enable``; docs/operations.md "Secret values at
rest"), a value of a secret variable is stored sealed (migration 0012,
``secrets/store.py``): the calls that write or read values take the replica's ``keyring``
and raise SecretsKeyMissingError (a ValidationError) when a value is sealed and it is None.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from qinglong.control.db.engine import run_named
from qinglong.shared.errors import NotFoundError, ValidationError
from qinglong.shared.variable_limits import (
    VARIABLE_MAX_BYTES,
    check_settable_name,
    check_variable_name,
    check_variables_size,
)

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from qinglong.control.secrets.sealing import Keyring

JOIN = "&"
VALUE_MAX_BYTES = VARIABLE_MAX_BYTES  # 128 KiB (shared/variable_limits.py)
ENV_MAX_BYTES = 1024 * 1024
REMARK_MAX_CHARS = 200
_SHIFT = 1_000_000_000  # moves positions out of the way while renumbering


def check_name(name: str) -> str:
    """``name`` under the one rule of both profiles (``shared/variable_limits.py``
    ``check_variable_name``: ``[A-Za-z_][A-Za-z0-9_]*``, 1-128); raises ValidationError."""
    return check_variable_name(name, "name")


def _lock(conn: Connection, name: str) -> dict[str, Any]:
    row = run_named(conn, "SELECT name, pools, secret FROM global_variables WHERE name ="
                          " %(name)s FOR UPDATE", {"name": name}).mappings().first()
    if row is None:
        raise NotFoundError(f"no such variable {name!r}")
    return dict(row)


def list_variables(conn: Connection) -> list[dict[str, Any]]:
    """Every variable by name: ``{"name", "pools" (list or None), "secret", "updated_by",
    "updated_at", "values": [{"index", "remark", "enabled", "updated_at"}]}``; never a
    value."""
    values: dict[str, list[dict[str, Any]]] = {}
    for row in run_named(conn, "SELECT name, position, remark, enabled, updated_at FROM"
                               " global_variable_values ORDER BY name, position").mappings():
        values.setdefault(row["name"], []).append(
            {"index": row["position"], "remark": row["remark"], "enabled": row["enabled"],
             "updated_at": row["updated_at"]})
    return [{**dict(row), "values": values.get(row["name"], [])}
            for row in run_named(conn, "SELECT name, pools, secret, updated_by, updated_at"
                                       " FROM global_variables ORDER BY name").mappings()]


def pool_secret_names(conn: Connection, *, pool_id: str) -> set[str]:
    """Names of the secret variables (``secret`` true, at least one enabled value) whose scope
    reaches the pool with id ``pool_id``: the worker masks their values in the attempt's
    output (docs/operations.md §9). Names only; never a value."""
    return {row[0] for row in run_named(conn, (
        "SELECT v.name FROM global_variables v"
        " WHERE v.secret AND EXISTS (SELECT 1 FROM global_variable_values x"
        "   WHERE x.name = v.name AND x.enabled)"
        " AND (v.pools IS NULL OR (SELECT p.name FROM worker_pools p"
        "   WHERE p.id = %(pool_id)s) = ANY (v.pools))"), {"pool_id": pool_id})}


def pool_environment(conn: Connection, pool_name: str | None = None, *,
                     pool_id: str | None = None, keyring: Keyring | None = None
                     ) -> dict[str, str]:
    """``{NAME: enabled values joined with &}`` for the variables whose scope reaches the
    pool named ``pool_name`` (or with id ``pool_id``); secrets, for a claim answer only.
    Sealed values are opened with ``keyring`` (SecretsKeyMissingError without one,
    SealError when one does not open)."""
    from qinglong.control.secrets.store import opened_variable_value

    out: dict[str, list[str]] = {}
    for row in run_named(conn, (
            "SELECT v.name, x.value, x.sealed_value FROM global_variables v"
            " JOIN global_variable_values x ON x.name = v.name AND x.enabled"
            " WHERE v.pools IS NULL OR coalesce(%(pool)s, (SELECT p.name FROM worker_pools p"
            "   WHERE p.id = %(pool_id)s)) = ANY (v.pools)"
            " ORDER BY v.name, x.position"), {"pool": pool_name, "pool_id": pool_id}):
        out.setdefault(row[0], []).append(
            opened_variable_value(keyring, row[0], row[1], row[2]))
    return {name: JOIN.join(vals) for name, vals in out.items()}


def _check_sizes(conn: Connection, keyring: Keyring | None) -> None:
    """Refuse a state some pool's tasks could not be started with (ValidationError)."""
    pools = [r[0] for r in run_named(conn, "SELECT name FROM worker_pools")]
    scoped = {r[0] for r in run_named(
        conn, "SELECT DISTINCT unnest(pools) FROM global_variables WHERE pools IS NOT NULL")}
    for pool in sorted(set(pools) | scoped | {""}):
        check_variables_size(pool_environment(conn, pool, keyring=keyring), field="value",
                             total_max_bytes=ENV_MAX_BYTES,
                             total_what="the variables of a pool")


@dataclass(frozen=True)
class Stored:
    """What :func:`put_value` did: the value's ``index`` (1-based position) and whether
    anything was ``changed`` (False: ``add`` of a value the variable already holds)."""

    index: int
    changed: bool


def export_values(conn: Connection, *, secrets: bool, keyring: Keyring | None = None
                  ) -> list[dict[str, Any]]:
    """The enabled values to export, by name then position: ``[{"name", "value",
    "remark", "secret"}]`` of the plain variables, and of the secret ones too when
    ``secrets`` (the caller decides who may: the API and the panel allow an admin only,
    docs/protocols.md §4.5 "Global variables"). Sealed values are opened with ``keyring``
    (SecretsKeyMissingError without one, SealError when one does not open); without
    ``secrets`` nothing sealed is read."""
    from qinglong.control.secrets.store import opened_variable_value

    rows = run_named(conn, (
        "SELECT v.name, v.secret, x.value, x.sealed_value, x.remark FROM global_variables v"
        " JOIN global_variable_values x ON x.name = v.name AND x.enabled"
        " WHERE %(secrets)s OR NOT v.secret ORDER BY v.name, x.position"),
        {"secrets": secrets}).mappings()
    return [{"name": row["name"], "secret": bool(row["secret"]), "remark": row["remark"],
             "value": opened_variable_value(keyring, row["name"], row["value"],
                                            row["sealed_value"])} for row in rows]


def change_scope(conn: Connection, name: str, pools: Sequence[str] | None, *, who: str,
              keyring: Keyring | None = None) -> list[str] | None:
    """Set the scope of variable ``name`` to ``pools`` (None or empty: every pool again) in
    the caller's transaction, values untouched; returns the scope stored. Raises
    NotFoundError, or ValidationError when a pool's variables would pass 1 MiB (a widened
    scope adds them to more pools; SecretsKeyMissingError is one)."""
    _lock(conn, name)
    scope = list(pools) if pools else None
    run_named(conn, "UPDATE global_variables SET pools = %(pools)s, updated_by = %(who)s,"
                    " updated_at = now() WHERE name = %(name)s",
              {"name": name, "pools": scope, "who": who})
    _check_sizes(conn, keyring)
    return scope


def _held(conn: Connection, name: str, value: str, keyring: Keyring | None) -> int | None:
    """The position of the first value of ``name`` equal to ``value`` (enabled or not),
    or None; sealed values are opened with ``keyring``."""
    from qinglong.control.secrets.store import opened_variable_value

    for row in run_named(conn, "SELECT position, value, sealed_value FROM"
                               " global_variable_values WHERE name = %(name)s"
                               " ORDER BY position", {"name": name}):
        if opened_variable_value(keyring, name, row[1], row[2]) == value:
            return int(row[0])
    return None


def put_value(conn: Connection, name: str, value: str, *, who: str, remark: str | None,
              index: int | None, add: bool, secret: bool | None,
              pools: Sequence[str] | None, set_pools: bool,
              keyring: Keyring | None = None) -> Stored:
    """Store ``value`` for ``name`` in the caller's transaction; returns its index and
    whether a value changed.

    ``add``: a new last value (enabled), unless the variable already holds this value
    (enabled or not): then nothing is added and its index is returned with ``changed``
    False, as the local profile does (docs/panel.md "Variables": importing the same lines
    twice adds them once); ``index``: replace that value (keeping its flag,
    and its remark unless ``remark`` is given); neither: the variable becomes this one
    value. ``set_pools``: the scope becomes ``pools`` (None: every pool); otherwise a new
    variable reaches every pool and an existing one keeps its scope. Raises
    ValidationError (an empty value; never echoing the value; SecretsKeyMissingError is
    one) or NotFoundError (no such index). A secret variable's value is sealed with ``keyring``
    once sealing is on (``secrets/store.py``). ``PATH``, ``LD_*`` and ``QL3_*`` are refused
    (``shared/variable_limits.check_settable_name``).
    """
    check_settable_name(check_name(name), "name")
    if not value:  # as the local owner and both profiles' `vars set` refuse it
        raise ValidationError("value", "the value is empty")
    if "\x00" in value or len(value.encode("utf-8", "surrogateescape")) > VALUE_MAX_BYTES:
        raise ValidationError("value", f"a value is text without NUL bytes, at most "
                                       f"{VALUE_MAX_BYTES} bytes")
    if remark is not None and (len(remark) > REMARK_MAX_CHARS or any(
            ord(c) < 32 or ord(c) == 127 for c in remark)):
        raise ValidationError("remark", f"a remark is at most {REMARK_MAX_CHARS} characters "
                                        "on one line")
    params = {"name": name, "who": who, "pools": list(pools) if pools else None,
              "set_pools": set_pools, "secret": secret}
    run_named(conn, (
        "INSERT INTO global_variables (name, pools, secret, updated_by)"
        " VALUES (%(name)s, %(pools)s, coalesce(%(secret)s, true), %(who)s)"
        " ON CONFLICT (name) DO UPDATE SET updated_by = excluded.updated_by,"
        " updated_at = now(), secret = coalesce(%(secret)s, global_variables.secret),"
        " pools = CASE WHEN %(set_pools)s THEN excluded.pools ELSE global_variables.pools END"),
        params)
    from qinglong.control.secrets.store import stored_variable_value

    locked = _lock(conn, name)
    if add and index is None:
        held = _held(conn, name, value, keyring)
        if held is not None:
            _check_sizes(conn, keyring)  # the scope may have changed all the same
            return Stored(held, False)
    plain, sealed = stored_variable_value(conn, keyring, name, value,
                                          secret=bool(locked["secret"]))
    args = {"name": name, "value": plain, "sealed": sealed, "remark": remark,
            "index": index}
    if index is not None:
        done = run_named(conn, (
            "UPDATE global_variable_values SET value = %(value)s, sealed_value = %(sealed)s,"
            " remark = coalesce(%(remark)s, remark), updated_at = now()"
            " WHERE name = %(name)s AND position = %(index)s"), args).rowcount
        if not done:
            raise NotFoundError(f"variable {name} has no value #{index}")
        position = index
    else:
        if not add:
            run_named(conn, "DELETE FROM global_variable_values WHERE name = %(name)s", args)
        position = int(run_named(conn, (
            "INSERT INTO global_variable_values (name, position, value, sealed_value,"
            " remark) SELECT %(name)s, coalesce(max(position), 0) + 1, %(value)s, %(sealed)s,"
            " coalesce(%(remark)s, '') FROM global_variable_values WHERE name = %(name)s"
            " RETURNING position"), args).scalar_one())
    _check_sizes(conn, keyring)
    return Stored(position, True)


def set_enabled(conn: Connection, name: str, index: int | None, enabled: bool,
                who: str, keyring: Keyring | None = None) -> int:
    """Enable or disable value #index (None: all); the value is kept. Returns how many
    changed. Raises NotFoundError; ValidationError as ``put_value``."""
    _lock(conn, name)
    args = {"name": name, "index": index, "enabled": enabled, "who": who}
    if index is not None and run_named(conn, (
            "SELECT 1 FROM global_variable_values WHERE name = %(name)s"
            " AND position = %(index)s"), args).first() is None:
        raise NotFoundError(f"variable {name} has no value #{index}")
    changed = run_named(conn, (
        "UPDATE global_variable_values SET enabled = %(enabled)s, updated_at = now()"
        " WHERE name = %(name)s AND (%(index)s::int IS NULL OR position = %(index)s)"
        " AND enabled <> %(enabled)s"), args).rowcount
    run_named(conn, "UPDATE global_variables SET updated_by = %(who)s, updated_at = now()"
                    " WHERE name = %(name)s", args)
    _check_sizes(conn, keyring)
    return int(changed)


def remove(conn: Connection, name: str, index: int | None) -> None:
    """Remove the variable, or its value #index (later values move up; the last value
    removes the variable). Raises NotFoundError."""
    _lock(conn, name)
    args = {"name": name, "index": index}
    if index is None:
        run_named(conn, "DELETE FROM global_variables WHERE name = %(name)s", args)
        return
    if not run_named(conn, "DELETE FROM global_variable_values WHERE name = %(name)s"
                           " AND position = %(index)s", args).rowcount:
        raise NotFoundError(f"variable {name} has no value #{index}")
    run_named(conn, (  # two steps: the primary key is checked per row
        "UPDATE global_variable_values SET position = position + %(shift)s"
        " WHERE name = %(name)s AND position > %(index)s"), {**args, "shift": _SHIFT})
    run_named(conn, (
        "UPDATE global_variable_values SET position = position - %(shift)s - 1"
        " WHERE name = %(name)s AND position > %(shift)s"), {**args, "shift": _SHIFT})
    if run_named(conn, "SELECT 1 FROM global_variable_values WHERE name = %(name)s",
                 args).first() is None:
        run_named(conn, "DELETE FROM global_variables WHERE name = %(name)s", args)
