"""The runtime role holds exactly its grants; readiness names what is wrong (docs/protocols.md
§4.1)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pg_control_db import PgDb, clone, seed_run

from pg_reaper import Reaper
from qinglong.control.readiness import CapabilityStatus, readiness
from qinglong.shared.ids import uuid7

pytestmark = [pytest.mark.integration, pytest.mark.postgres]
QL3 = str(Path(sys.executable).parent / "ql3")


def _as_runtime(conn: psycopg.Connection[Any], role: str, statement: str) -> None:
    with conn.transaction():
        conn.execute(f'SET LOCAL ROLE "{role}"')
        conn.execute(statement)


def _tombstone(conn: psycopg.Connection[Any], db: PgDb, role: str) -> str:
    with db.sa() as sa:
        seeded = seed_run(sa)
    attempt = seeded.attempt_ids[0]
    _as_runtime(conn, role, (
        "INSERT INTO run_attempt_log_artifact_tombstones (attempt_id, project_id, run_id,"
        " artifact_id, outcome, retired_at, evidence, evidence_sha256)"
        f" SELECT a.id, r.project_id, r.id, 'wlog-' || a.id, 'deleted', now(), '{{}}',"
        f" repeat('d', 64) FROM attempts a JOIN runs r ON r.id = a.run_id"
        f" WHERE a.id = '{attempt}'"
    ))
    return attempt


FORBIDDEN = [
    "UPDATE run_attempt_log_artifact_tombstones SET outcome = 'already_absent'",
    "DELETE FROM run_attempt_log_artifact_tombstones",
    "TRUNCATE run_attempt_log_artifact_tombstones",
    "CREATE TABLE evil (x int)",
    "ALTER TABLE run_attempt_log_retention_controls ADD COLUMN evil int",
    "DROP TABLE events",
    "CREATE INDEX evil ON runs (status)",
    "INSERT INTO ql3_migration_ledger (seq, name, sha256, additive)"
    " VALUES (99, '0099-x.sql', repeat('e', 64), true)",
    "UPDATE ql3_migration_ledger SET additive = true",
    "DELETE FROM ql3_migration_ledger",
    # 0005, the cluster engine: tasks are removed softly, history is append-only, pools are
    # the schema owner's, tokens are never deleted (revoked instead)
    "DELETE FROM tasks",
    "UPDATE task_events SET kind = 'x'",
    "DELETE FROM task_events",
    "INSERT INTO worker_pools (id, name) VALUES (gen_random_uuid(), 'evil')",
    "UPDATE worker_pools SET labels = '{\"gpu\": \"yes\"}'",
    "DELETE FROM worker_pools",
    "DELETE FROM worker_incarnations",
    "DELETE FROM api_tokens",
    "TRUNCATE occurrences",
    "ALTER TABLE tasks ADD COLUMN evil int",
    # 0006, script bundles: a record is immutable (a new digest is a new row), never truncated
    "UPDATE script_bundles SET size_bytes = 1",
    "UPDATE script_bundles SET members = '[]'",
    "TRUNCATE script_bundles",
    "ALTER TABLE script_bundles ADD COLUMN evil int",
    "ALTER TABLE tasks DROP CONSTRAINT tasks_bundle_digest_fkey",
    "DROP INDEX tasks_bundle_digest_idx",
    # 0007, live logs: a chunk row is appended or deleted, never rewritten; the window and
    # the sweep's index are the owner's
    "UPDATE attempt_log_chunks SET data = ''::bytea",
    "TRUNCATE attempt_log_chunks",
    "ALTER TABLE attempt_log_chunks ADD COLUMN evil int",
    "DROP INDEX attempts_partial_log_idx",
    # 0011, sealed secrets: sealing is never switched off from the runtime login, and the
    # sealed column is data, not schema
    "DELETE FROM secret_sealing",
    "TRUNCATE secret_sealing",
    "ALTER TABLE tasks DROP COLUMN sealed_env",
    "DROP INDEX tasks_plaintext_secret_idx",
    # 0009, global variables: values are written row by row, never truncated or re-shaped
    "TRUNCATE global_variables",
    "TRUNCATE global_variable_values",
    "ALTER TABLE global_variable_values ADD COLUMN evil int",
    "ALTER TABLE global_variable_values DROP CONSTRAINT global_variable_values_value_check",
    "CREATE TRIGGER leak AFTER INSERT ON global_variable_values"
    " FOR EACH ROW EXECUTE FUNCTION suppress_redundant_updates_trigger()",
    # 0012, sealed variable values: the sealed column, its check and index are schema
    "ALTER TABLE global_variable_values DROP COLUMN sealed_value",
    "ALTER TABLE global_variable_values"
    " DROP CONSTRAINT global_variable_values_sealed_value_check",
    "DROP INDEX global_variable_values_plaintext_idx",
    # 0014, sealed channel URLs: the trigger and the plaintext index are schema
    "DROP TRIGGER notify_channels_seal_only ON notify_channels",
    "ALTER TABLE notify_channels DROP COLUMN sealed_url",
    "DROP INDEX notify_channels_plaintext_idx",
    "TRUNCATE notifications",
    # 0010, history pruning: runs, attempts and events may be deleted (by the pruning batch),
    # never truncated; the one job row is never added to nor removed
    "TRUNCATE runs",
    "TRUNCATE attempts",
    "TRUNCATE events",
    "INSERT INTO history_prune_jobs (id) VALUES (1)",
    "DELETE FROM history_prune_jobs",
    "TRUNCATE history_prune_jobs",
    "ALTER TABLE history_prune_jobs ADD COLUMN evil int",
    # orphan collection's evidence is append-only; its job row is never added nor removed
    "UPDATE orphan_log_objects SET outcome = 'deleted'",
    "DELETE FROM orphan_log_objects",
    "TRUNCATE orphan_log_objects",
    "INSERT INTO orphan_sweep_jobs (id) VALUES (1)",
    "DELETE FROM orphan_sweep_jobs",
]


@pytest.fixture(scope="module")
def forbidden_db(pg_template: PgDb, pg_reaper: Reaper) -> Iterator[PgDb]:
    """One migrated database holding one tombstone, shared by the ``FORBIDDEN`` cases: each
    case runs inside a transaction that is always rolled back, so every case sees this same
    database whatever the one before it did."""
    with clone(pg_template, pg_reaper) as db:
        with db.connect() as conn:
            _tombstone(conn, db, db.runtime_role)
        yield db


@pytest.mark.parametrize("statement", FORBIDDEN)
def test_runtime_role_cannot(forbidden_db: PgDb, statement: str) -> None:
    with forbidden_db.connect() as conn, conn.transaction(force_rollback=True), \
            pytest.raises(psycopg.errors.InsufficientPrivilege):
        _as_runtime(conn, forbidden_db.runtime_role, statement)


def test_runtime_role_may_update_a_channel_only_to_seal_its_url(pg_db: PgDb) -> None:
    """0014: UPDATE on notify_channels is granted for sealing; a plain URL edit, or a change
    to any other column, is refused by the owner's trigger, and the sealed form passes."""
    channel = uuid7()
    with pg_db.connect() as conn:
        conn.execute("INSERT INTO notify_channels (id, url, target) VALUES"
                     " (%s, 'json://127.0.0.1/hook', 'json://127.0.0.1/…')", (channel,))
        for statement in ("UPDATE notify_channels SET url = 'json://evil.example/'",
                          "UPDATE notify_channels SET target = 'json://evil.example/…'",
                          "UPDATE notify_channels SET url = '', sealed_url = 'v1.k.n.c',"
                          " notify_on = '{succeeded}'"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                _as_runtime(conn, pg_db.runtime_role, statement)
        _as_runtime(conn, pg_db.runtime_role,
                    "UPDATE notify_channels SET url = '', sealed_url = 'v1.k.n.c'")
        row = conn.execute("SELECT url, sealed_url FROM notify_channels").fetchone()
    assert row == ("", "v1.k.n.c")


def test_runtime_role_can_insert_and_read_tombstones_and_use_controls(pg_db: PgDb) -> None:
    with pg_db.connect() as conn:
        attempt = _tombstone(conn, pg_db, pg_db.runtime_role)
        _as_runtime(conn, pg_db.runtime_role, "SELECT * FROM run_attempt_log_artifact_tombstones")
        _as_runtime(conn, pg_db.runtime_role,
                    "DELETE FROM run_attempt_log_retention_controls WHERE false")
        _as_runtime(conn, pg_db.runtime_role, "SELECT count(*) FROM ql3_migration_ledger")
        row = conn.execute("SELECT outcome FROM run_attempt_log_artifact_tombstones"
                           " WHERE attempt_id = %s", (attempt,)).fetchone()
    assert row == ("deleted",)


def test_readiness_is_ready_and_lists_degraded_capabilities(pg_db: PgDb) -> None:
    probes = [lambda: CapabilityStatus("object_store", "degraded", "object_store_unsafe",
                                       "DELETE with a wrong If-Match succeeded")]
    with pg_db.pooled() as engine:
        verdict = readiness(engine, runtime_role=pg_db.runtime_role, capabilities=probes)
    assert verdict.ready and verdict.reason is None
    assert verdict.to_json()["degraded"] == [
        {"capability": "object_store", "reason": "object_store_unsafe",
         "detail": "DELETE with a wrong If-Match succeeded"}
    ]


def test_readiness_fails_on_an_unavailable_capability(pg_db: PgDb) -> None:
    probes = [lambda: CapabilityStatus("object_store", "unavailable", "object_store_unavailable")]
    with pg_db.pooled() as engine:
        verdict = readiness(engine, runtime_role=pg_db.runtime_role, capabilities=probes)
    assert (verdict.ready, verdict.reason) == (False, "object_store_unavailable")


@pytest.mark.parametrize("drift", [
    'GRANT UPDATE ON run_attempt_log_artifact_tombstones TO "{role}"',
    'REVOKE DELETE ON run_attempt_log_retention_controls FROM "{role}"',
    'GRANT CREATE ON SCHEMA public TO "{role}"',
    'CREATE TABLE side (x int); GRANT SELECT ON side TO "{role}"',
    'GRANT UPDATE (evidence, outcome) ON run_attempt_log_artifact_tombstones TO "{role}"',
    'GRANT REFERENCES (name) ON ql3_migration_ledger TO "{role}"',
])
def test_readiness_names_an_invalid_runtime_role(pg_db: PgDb, drift: str) -> None:
    with pg_db.connect() as conn, pg_db.pooled() as engine:
        conn.execute(drift.format(role=pg_db.runtime_role))
        verdict = readiness(engine, runtime_role=pg_db.runtime_role)
    assert (verdict.ready, verdict.reason) == (False, "runtime_role_invalid")


def test_readiness_of_a_missing_role(pg_db: PgDb) -> None:
    with pg_db.pooled() as engine:
        verdict = readiness(engine, runtime_role=f"ql3rt_missing_{uuid7()[:8]}".replace("-", ""))
    assert verdict.reason == "runtime_role_invalid"


def test_cli_migrate_and_readiness(empty_db: PgDb) -> None:
    args = ["--database-url", empty_db.url, "--runtime-role", empty_db.runtime_role]
    before = subprocess.run([QL3, "control", "readiness", *args, "--json"],
                            capture_output=True, text=True, timeout=60, check=False)
    assert before.returncode == 1
    assert json.loads(before.stdout)["reason"] == "migration_pending"
    done = subprocess.run([QL3, "control", "migrate", *args],
                          capture_output=True, text=True, timeout=60, check=True)
    from qinglong.control.db.migrations import EXPECTED_MIGRATION_COUNT

    assert f"applied {EXPECTED_MIGRATION_COUNT}" in done.stdout
    after = subprocess.run([QL3, "control", "readiness", *args, "--json"],
                           capture_output=True, text=True, timeout=60, check=False)
    assert after.returncode == 0, after.stderr
    assert json.loads(after.stdout)["ready"] is True
    again = subprocess.run([QL3, "control", "migrate", *args, "--json"],
                           capture_output=True, text=True, timeout=60, check=True)
    assert json.loads(again.stdout) == {"applied": [], "ahead": []}


@pytest.mark.parametrize("also", ["superuser", "owner", "pg_write_all_data"])
def test_a_sweeper_login_that_can_become_a_privileged_role_is_refused(
        pg_db: PgDb, also: str) -> None:
    """A login in the runtime role that is also a member (even indirectly) of a superuser
    role, of the schema owner or of pg_write_all_data could SET ROLE to it or inherits its
    rights: refused. The same login without that membership is accepted."""
    from pg_control_db import admin, drop_role, unique

    from qinglong.control.db.roles import refuse_privileged_session
    from qinglong.control.errors import RuntimeRoleRefusedError

    login, middle, privileged = unique("ql3lg"), unique("ql3mid"), unique("ql3priv")
    with admin() as conn:
        conn.execute(f'CREATE ROLE "{login}" LOGIN IN ROLE "{pg_db.runtime_role}"')
        conn.execute(f'CREATE ROLE "{middle}" NOLOGIN')
        if also == "superuser":
            conn.execute(f'CREATE ROLE "{privileged}" NOLOGIN SUPERUSER')
        elif also == "owner":
            conn.execute(f'CREATE ROLE "{privileged}" NOLOGIN')
    target = "pg_write_all_data" if also == "pg_write_all_data" else privileged
    url = f"postgresql://{login}@127.0.0.1:5432/{pg_db.name}"
    try:
        if also == "owner":
            with pg_db.connect() as conn:
                conn.execute(f'ALTER TABLE run_attempt_log_artifact_tombstones OWNER TO '
                             f'"{privileged}"')
        with pg_db.sa(url) as sa, sa.begin():
            refuse_privileged_session(sa, "--database-url")  # only the runtime role: fine
        with admin() as conn:  # indirect: login -> middle -> privileged
            conn.execute(f'GRANT "{middle}" TO "{login}"')
            conn.execute(f'GRANT "{target}" TO "{middle}"')
        with pg_db.sa(url) as sa, sa.begin(), pytest.raises(
                RuntimeRoleRefusedError, match="use a login that is a member of the runtime"):
            refuse_privileged_session(sa, "--database-url")
    finally:
        if also == "owner":
            with pg_db.connect() as conn:
                conn.execute(f'REASSIGN OWNED BY "{privileged}" TO postgres')
        for role in (login, middle, privileged):
            drop_role(role)


def test_a_replica_readiness_names_a_privileged_login_while_the_cli_check_does_not(
        pg_db: PgDb) -> None:
    """``serve``'s readiness (refuse_privileged) over the superuser's URL is not ready with
    ``runtime_login_privileged``, even though the schema and grants are fine; the same
    check over a login that is only a member of the runtime role is ready, and the
    owner-facing ``ql3 control readiness`` (no refuse_privileged) stays ready as before."""
    from pg_control_db import admin, drop_role, unique

    from qinglong.control.readiness import readiness

    with pg_db.pooled() as engine:
        verdict = readiness(engine, runtime_role=pg_db.runtime_role, refuse_privileged=True)
        assert (verdict.ready, verdict.reason) == (False, "runtime_login_privileged")
        assert verdict.detail == "login: logs in or acts as a superuser"
        assert readiness(engine, runtime_role=pg_db.runtime_role).ready
    login = unique("ql3lg")
    with admin() as conn:
        conn.execute(f'CREATE ROLE "{login}" LOGIN IN ROLE "{pg_db.runtime_role}"')
    try:
        url = f"postgresql://{login}@127.0.0.1:5432/{pg_db.name}"
        with pg_db.pooled(url) as engine:
            verdict = readiness(engine, runtime_role=pg_db.runtime_role,
                                refuse_privileged=True)
            assert verdict.ready, verdict
    finally:
        drop_role(login)
