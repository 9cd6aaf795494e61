"""The runtime role: exactly the per-table grants its queries need (docs/protocols.md §4.1).

The migration owner (the role that runs ``ql3 control migrate``) owns every object. The
runtime role (default ``ql3_runtime``; configurable, because roles are global to a PostgreSQL
cluster) may read and write what the control plane's queries touch, may only SELECT/INSERT
tombstones (immutable evidence, ADR-0379 §2), may only read the migration ledger, and may run
no DDL. ``runtime_role_problems`` checks the effective privileges for readiness.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from qinglong.control.db.engine import run_named
from qinglong.control.errors import MigrationOwnerRequiredError, RuntimeRoleRefusedError

if TYPE_CHECKING:
    from sqlalchemy import Connection

DEFAULT_RUNTIME_ROLE = "ql3_runtime"
_ROLE_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
PRIVILEGES = ("SELECT", "INSERT", "UPDATE", "DELETE", "TRUNCATE", "REFERENCES", "TRIGGER")
COLUMN_PRIVILEGES = ("SELECT", "INSERT", "UPDATE", "REFERENCES")  # grantable per column

# ADR-0379 §2: controls SELECT/INSERT/UPDATE/DELETE, tombstones SELECT/INSERT only.
RUNTIME_GRANTS: dict[str, frozenset[str]] = {
    "tasks": frozenset({"SELECT", "INSERT", "UPDATE"}),
    # DELETE on runs, attempts, events: history pruning (0010; docs/operations.md)
    "runs": frozenset({"SELECT", "INSERT", "UPDATE", "DELETE"}),
    "attempts": frozenset({"SELECT", "INSERT", "UPDATE", "DELETE"}),
    "events": frozenset({"SELECT", "INSERT", "DELETE"}),
    "run_attempt_log_artifacts": frozenset({"SELECT", "INSERT"}),
    "run_attempt_log_retention_controls": frozenset({"SELECT", "INSERT", "UPDATE", "DELETE"}),
    "run_attempt_log_artifact_tombstones": frozenset({"SELECT", "INSERT"}),
    "run_attempt_log_retention_candidates": frozenset({"SELECT"}),  # a view (0003)
    "ql3_migration_ledger": frozenset({"SELECT"}),
    # 0005, the cluster engine (docs/protocols.md §4.2, §4.5)
    "task_events": frozenset({"SELECT", "INSERT"}),
    "occurrences": frozenset({"SELECT", "INSERT", "UPDATE", "DELETE"}),  # merge, prune
    "worker_pools": frozenset({"SELECT"}),  # created by the schema owner (ql3 control token)
    "worker_incarnations": frozenset({"SELECT", "INSERT", "UPDATE"}),
    "api_tokens": frozenset({"SELECT", "INSERT", "UPDATE"}),  # admin scope manages tokens
    # 0006, script bundles (docs/protocols.md §4.7): immutable rows, pushed and removed
    "script_bundles": frozenset({"SELECT", "INSERT", "DELETE"}),
    # 0007, live logs (docs/protocols.md §4.9): appended, trimmed to the window, and deleted
    # at completion or by the partial-log sweep; a row is never rewritten in place
    "attempt_log_chunks": frozenset({"SELECT", "INSERT", "DELETE"}),
    # 0011, sealed secrets (docs/operations.md): the switch is set and moved, never removed
    "secret_sealing": frozenset({"SELECT", "INSERT", "UPDATE"}),
    # 0009, global variables (docs/protocols.md §4.5): operators set, reorder, remove values
    "global_variables": frozenset({"SELECT", "INSERT", "UPDATE", "DELETE"}),
    "global_variable_values": frozenset({"SELECT", "INSERT", "UPDATE", "DELETE"}),
    # a URL is never edited; UPDATE only seals it (0014: a trigger refuses any other change)
    "notify_channels": frozenset({"SELECT", "INSERT", "UPDATE", "DELETE"}),
    # outcomes are kept while their run is; history pruning deletes them with it (0010)
    "notifications": frozenset({"SELECT", "INSERT", "UPDATE", "DELETE"}),
    # 0010, history pruning: the one job row is locked and updated, never added or removed
    "history_prune_jobs": frozenset({"SELECT", "UPDATE"}),
    # 0010, orphan log objects: the job row is leased and moved; evidence is append-only
    "orphan_sweep_jobs": frozenset({"SELECT", "UPDATE"}),
    "orphan_log_objects": frozenset({"SELECT", "INSERT"}),
    # 0013, the web panel (docs/panel.md "Cluster"): sessions are created, touched, ended
    # and swept; sign-in failures are counted, cleared and swept
    "panel_sessions": frozenset({"SELECT", "INSERT", "UPDATE", "DELETE"}),
    "panel_signin_failures": frozenset({"SELECT", "INSERT", "UPDATE", "DELETE"}),
    # 0016, the panel's sign-in log: appended at each sign-in heard, swept after 90 days
    "panel_signins": frozenset({"SELECT", "INSERT", "DELETE"}),
    # 0017, the panel's saved views: listed, saved (replacing one of the same name), deleted
    "panel_views": frozenset({"SELECT", "INSERT", "UPDATE", "DELETE"}),
    # 0015, run now's Idempotency-Key: recorded, taken over after 24 h, pruned
    "run_request_keys": frozenset({"SELECT", "INSERT", "UPDATE", "DELETE"}),
}


def validate_role_name(role: str) -> str:
    """Return ``role`` if it is a plain lowercase identifier (≤ 63 bytes); else
    RuntimeRoleRefusedError (a RuntimeRoleError and a ValidationError: exit 2)."""
    if not _ROLE_NAME.match(role):
        raise RuntimeRoleRefusedError(
            "--runtime-role", "must be a lowercase identifier: a-z, 0-9, _ (at most 63)")
    return role


def refuse_unfit_runtime_role(conn: Connection, role: str) -> None:
    """RuntimeRoleRefusedError when ``role`` is the connecting role, a superuser, or owns
    objects in ``public``: revoking "everything else" from it would strip the owner's own
    rights and break every later migrate (docs/protocols.md §4.1: the runtime role is not the
    owner)."""
    row = run_named(
        conn,
        "SELECT %(role)s IN (current_user, session_user),"
        " coalesce((SELECT rolsuper FROM pg_roles WHERE rolname = %(role)s), false),"
        " EXISTS (SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
        "         JOIN pg_roles r ON r.oid = c.relowner"
        "         WHERE n.nspname = 'public' AND r.rolname = %(role)s)",
        {"role": role},
    ).one()
    same, superuser, owner = row
    why = ("is the role running the migration" if same else "is a superuser" if superuser
           else "owns objects in schema public" if owner else None)
    if why:
        raise RuntimeRoleRefusedError("--runtime-role", f"{role} {why}; give a separate "
                                                        "least-privilege role")


def refuse_non_owner(conn: Connection, option: str = "--database-url",
                     action: str = "run migrate") -> None:
    """MigrationOwnerRequiredError when the connecting role cannot create objects in schema
    ``public`` (e.g. migrate, or ``token create``, was given the runtime role's URL): the
    message names the role, which is not a secret, instead of the server's "permission
    denied for schema public"; ``option`` names the input that gave the URL and ``action``
    what must be run with the owner's URL instead (a fixed phrase of the caller). The
    message is three lines (the second and third indented) so that, after ``ql3: error:
    OPTION:``, each fits 80 columns (a role name of up to 40 characters)."""
    row = run_named(conn, "SELECT current_user, has_schema_privilege('public', 'CREATE')"
                    ).first()
    if row is not None and not row[1]:
        raise MigrationOwnerRequiredError(
            option, f"connects as role {row[0]!r},\n  which cannot create objects in "
                    f"schema public:\n  {action} with the migration owner's URL")


def refuse_privileged_session(conn: Connection, option: str) -> None:
    """RuntimeRoleRefusedError when ``conn``'s login or current role is, or is a member of
    (directly or through other roles, so it could SET ROLE to it or inherits its rights), a
    superuser, a role owning objects in ``public`` (the migration owner) or ``pg_write_all_data``:
    runtime commands hold only the runtime role's grants (docs/protocols.md §4.1, least privilege).
    A superuser login that only SETs ROLE is refused too: its credentials could RESET ROLE.
    ``option`` names the offending input."""
    row = run_named(
        conn,
        "SELECT bool_or(r.rolsuper), bool_or(EXISTS (SELECT 1 FROM pg_class c"
        "  JOIN pg_namespace n ON n.oid = c.relnamespace"
        "  WHERE n.nspname = 'public' AND c.relowner = r.oid)),"
        " bool_or(r.rolname = 'pg_write_all_data')"
        " FROM pg_roles r WHERE pg_has_role(session_user, r.oid, 'MEMBER')"
        "  OR pg_has_role(current_user, r.oid, 'MEMBER')").first()
    superuser, owner, write_all = row if row is not None else (False, False, False)
    why = ("a superuser" if superuser else "the owner of the schema" if owner
           else "a member of pg_write_all_data" if write_all else None)
    if why:
        raise RuntimeRoleRefusedError(
            option, f"logs in or acts as {why}; use a login that is a member of the runtime "
                    "role and nothing more, not of such a role (e.g. CREATE ROLE ql3_control "
                    "LOGIN PASSWORD '...' IN ROLE ql3_runtime, or the role given to `ql3 "
                    "control migrate --runtime-role`)")


def apply_runtime_grants(conn: Connection, role: str) -> None:
    """Create ``role`` (NOLOGIN) if missing, then set exactly ``RUNTIME_GRANTS`` on public.

    Runs inside the caller's transaction (``migrate``); revokes everything else first, so a
    re-run repairs drifted grants. Raises RuntimeRoleRefusedError for a bad name or an unfit
    role (``refuse_unfit_runtime_role``).
    """
    quote = conn.dialect.identifier_preparer.quote_identifier
    ident = quote(validate_role_name(role))
    refuse_unfit_runtime_role(conn, role)
    exists = run_named(conn, "SELECT 1 FROM pg_roles WHERE rolname = %(role)s",
                       {"role": role}).first()
    if exists is None:
        conn.exec_driver_sql(f"CREATE ROLE {ident} NOLOGIN")
    conn.exec_driver_sql(f"REVOKE ALL ON ALL TABLES IN SCHEMA public FROM {ident}")
    conn.exec_driver_sql(f"REVOKE ALL ON ALL SEQUENCES IN SCHEMA public FROM {ident}")
    conn.exec_driver_sql(f"REVOKE CREATE ON SCHEMA public FROM {ident}")
    conn.exec_driver_sql(f"GRANT USAGE ON SCHEMA public TO {ident}")
    for table, privileges in sorted(RUNTIME_GRANTS.items()):
        # privileges are this module's constants; names are quoted identifiers
        conn.exec_driver_sql(
            f"GRANT {', '.join(sorted(privileges))} ON TABLE {quote(table)} TO {ident}")


def never_granted(table: str, privilege: str) -> bool:
    """True for a privilege no release grants the runtime role, so a schema ahead of the
    code never excuses it (DESIGN.md §4.1): TRUNCATE or TRIGGER on anything (they bypass row
    evidence or run code on the owner's tables), any privilege but SELECT on the migration
    ledger, anything but SELECT/INSERT on tombstones (immutable evidence, ADR-0379 §2)."""
    if privilege in ("TRUNCATE", "TRIGGER"):
        return True
    if table == "ql3_migration_ledger":
        return privilege != "SELECT"
    if table == "run_attempt_log_artifact_tombstones":
        return privilege not in ("SELECT", "INSERT")
    return False


def runtime_role_problems(
    conn: Connection, role: str, *, schema_ahead: bool = False
) -> list[str]:
    """Every way the role's effective privileges differ from the reviewed set (empty: valid).

    Checks attributes (no superuser, createrole, createdb, bypassrls), no CREATE on the
    schema, and each privilege (table- and column-level) on every table of ``public``, so a
    grant left on a new table counts as a problem too. With ``schema_ahead`` (the ledger is
    ahead of this code by additive migrations only) a privilege beyond the reviewed set is
    a newer release's expand grant and is tolerated, on new and existing tables alike,
    unless ``never_granted``; a missing privilege or table is a problem either way (an
    expand step never revokes: removing a grant is a contract step).
    """
    if not _ROLE_NAME.match(role):
        return [f"invalid role name {role!r}"]
    attrs = run_named(
        conn,
        "SELECT rolsuper OR rolcreaterole OR rolcreatedb OR rolbypassrls"
        " FROM pg_roles WHERE rolname = %(role)s",
        {"role": role},
    ).first()
    if attrs is None:
        return [f"role {role} does not exist"]
    problems = [f"role {role} has admin attributes"] if attrs[0] else []
    if run_named(conn, "SELECT has_schema_privilege(%(role)s, 'public', 'CREATE')",
                 {"role": role}).scalar_one():
        problems.append("CREATE on schema public")

    def tolerated(table: str, priv: str) -> bool:
        return schema_ahead and not never_granted(table, priv)

    rows = run_named(
        conn,
        "SELECT c.relname, p.priv, has_table_privilege(%(role)s, c.oid, p.priv)"
        " FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
        " CROSS JOIN unnest(%(privs)s::text[]) AS p(priv)"
        " WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p', 'v', 'm')",
        {"role": role, "privs": list(PRIVILEGES)},
    ).all()
    seen: set[str] = set()
    extra: set[tuple[str, str]] = set()
    for table, priv, held in rows:
        seen.add(table)
        expected = priv in RUNTIME_GRANTS.get(table, frozenset())
        if held == expected:
            continue
        if held:
            extra.add((table, priv))
            if tolerated(table, priv):
                continue
        problems.append(f"{'extra' if held else 'missing'} {priv} on {table}")
    problems.extend(f"missing table {t}" for t in sorted(set(RUNTIME_GRANTS) - seen))
    # a column-level grant (GRANT UPDATE (evidence) ON tombstones) is invisible to
    # has_table_privilege; has_any_column_privilege sees table- and column-level grants
    columns = run_named(
        conn,
        "SELECT c.relname, p.priv, has_any_column_privilege(%(role)s, c.oid, p.priv)"
        " FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
        " CROSS JOIN unnest(%(privs)s::text[]) AS p(priv)"
        " WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p', 'v', 'm')",
        {"role": role, "privs": list(COLUMN_PRIVILEGES)},
    ).all()
    for table, priv, held in columns:
        if (held and priv not in RUNTIME_GRANTS.get(table, frozenset())
                and (table, priv) not in extra and not tolerated(table, priv)):
            problems.append(f"extra column-level {priv} on {table}")
    return problems
