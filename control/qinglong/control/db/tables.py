"""SQLAlchemy Core table metadata of the control database (docs/protocols.md §4.1, §4.5).

One module describes every table the migrations in ``migrations/postgres`` create; a test
(``integration/control/test_control_tables.py``) compares this metadata with the migrated
schema, so a migration without its metadata change (or the reverse) fails CI. The schema
itself only ever comes from the migrations: ``metadata.create_all`` is never called.

Used by the API for dynamic filters (Core ``select``); protocol statements (claims, leases,
finalize) stay named SQL in ``.sql`` files run through the same engine (``db/engine.py``).
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    ForeignKey,
    Integer,
    LargeBinary,
    MetaData,
    SmallInteger,
    Table,
    Text,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB, TIMESTAMP, UUID

metadata = MetaData()

_TS = TIMESTAMP(timezone=True)


def _uuid() -> UUID[str]:
    return UUID(as_uuid=False)


script_bundles = Table(
    "script_bundles", metadata,
    Column("digest", Text, primary_key=True),
    Column("object_key", Text, nullable=False),
    Column("size_bytes", BigInteger, nullable=False),
    Column("member_count", Integer, nullable=False),
    Column("unpacked_bytes", BigInteger, nullable=False),
    Column("members", JSONB, nullable=False),
    Column("created_by", Text),
    Column("created_at", _TS, nullable=False),
)

# 0009, global variables (docs/protocols.md §4.5 "Global variables")
global_variables = Table(
    "global_variables", metadata,
    Column("name", Text, primary_key=True),
    Column("pools", ARRAY(Text)),
    Column("secret", Boolean, nullable=False),
    Column("updated_by", Text),
    Column("updated_at", _TS, nullable=False),
)

global_variable_values = Table(
    "global_variable_values", metadata,
    Column("name", Text, ForeignKey("global_variables.name", ondelete="CASCADE"),
           primary_key=True),
    Column("position", Integer, primary_key=True),
    Column("value", Text, nullable=False),
    Column("remark", Text, nullable=False),
    Column("enabled", Boolean, nullable=False),
    Column("updated_at", _TS, nullable=False),
    Column("sealed_value", Text),  # 0012: sealed secret value, secrets/store.py
)

notify_channels = Table(
    "notify_channels", metadata,
    Column("id", _uuid(), primary_key=True),
    Column("url", Text, nullable=False),
    Column("target", Text, nullable=False),
    Column("notify_on", ARRAY(Text), nullable=False),
    Column("created_by", Text),
    Column("created_at", _TS, nullable=False),
    Column("sealed_url", Text),  # 0014: sealed channel URL, secrets/store.py
)

notifications = Table(
    "notifications", metadata,
    Column("id", _uuid(), primary_key=True),
    Column("run_id", _uuid(), ForeignKey("runs.id"), nullable=False),
    Column("channel_id", _uuid(), ForeignKey("notify_channels.id", ondelete="CASCADE"),
           nullable=False),
    Column("status", Text, nullable=False),
    Column("tries", Integer, nullable=False),
    Column("claimed_until", _TS),
    Column("last_error", Text),
    Column("created_at", _TS, nullable=False),
    Column("finished_at", _TS),
)

tasks = Table(
    "tasks", metadata,
    Column("id", _uuid(), primary_key=True),
    Column("project_id", _uuid(), nullable=False),
    Column("name", Text, nullable=False),
    Column("name_key", Text),  # 0008: shared.names.name_key(name), unique among live tasks
    Column("log_retention_s", BigInteger, nullable=False),
    Column("created_at", _TS, nullable=False),
    Column("argv", JSONB),
    Column("shell", Text),
    Column("schedule", Text),
    Column("timezone", Text, nullable=False),
    Column("env", JSONB, nullable=False),
    Column("cwd", Text),
    Column("timeout_s", Integer),
    Column("max_attempts", Integer, nullable=False),
    Column("retry_backoff_ms", Integer, nullable=False),
    Column("retry_backoff_cap_ms", Integer, nullable=False),
    Column("concurrency_policy", Text, nullable=False),
    Column("catchup_grace_s", Integer, nullable=False),
    Column("labels", JSONB, nullable=False),
    Column("log_limit_bytes", BigInteger, nullable=False),
    Column("enabled", Boolean, nullable=False),
    Column("bundle_digest", Text, ForeignKey("script_bundles.digest")),
    Column("entry_point", Text),
    Column("next_fire_at", _TS),
    Column("schedule_version", BigInteger, nullable=False),
    Column("run_counter", BigInteger, nullable=False),
    Column("version", BigInteger, nullable=False),
    Column("updated_at", _TS, nullable=False),
    Column("deleted_at", _TS),
    Column("history_retention_s", BigInteger),  # 0010: NULL = the cluster default
    Column("sealed_env", JSONB),  # 0011: {"NAME": sealed value}, secrets/store.py
    Column("pinned", Boolean, nullable=False),  # 0017: first on the panel's Tasks page
)

runs = Table(
    "runs", metadata,
    Column("id", _uuid(), primary_key=True),
    Column("project_id", _uuid(), nullable=False),
    Column("task_id", _uuid(), ForeignKey("tasks.id"), nullable=False),
    Column("owner", Text, nullable=False),
    Column("status", Text, nullable=False),
    Column("version", BigInteger, nullable=False),
    Column("finished_at", _TS),
    Column("created_at", _TS, nullable=False),
    Column("number", BigInteger),
    Column("trigger", Text, nullable=False),
    Column("scheduled_for", _TS),
    Column("not_before", _TS, nullable=False),
    Column("attempt_count", Integer, nullable=False),
    Column("cancel_requested_at", _TS),
    Column("started_at", _TS),
    Column("exit_code", Integer),
    Column("updated_at", _TS, nullable=False),
)

worker_pools = Table(
    "worker_pools", metadata,
    Column("id", _uuid(), primary_key=True),
    Column("name", Text, nullable=False, unique=True),
    Column("labels", JSONB, nullable=False),
    Column("created_at", _TS, nullable=False),
)

worker_incarnations = Table(
    "worker_incarnations", metadata,
    Column("id", _uuid(), primary_key=True),
    Column("pool_id", _uuid(), ForeignKey("worker_pools.id"), nullable=False),
    Column("name", Text, nullable=False),
    Column("labels", JSONB, nullable=False),
    Column("concurrency", Integer, nullable=False),
    Column("started_at", _TS, nullable=False),
    Column("last_seen_at", _TS, nullable=False),
    Column("stopped_at", _TS),
)

attempts = Table(
    "attempts", metadata,
    Column("id", _uuid(), primary_key=True),
    Column("run_id", _uuid(), ForeignKey("runs.id"), nullable=False),
    Column("number", Integer, nullable=False),
    Column("executor", Text, nullable=False),
    Column("status", Text, nullable=False),
    Column("version", BigInteger, nullable=False),
    Column("finished_at", _TS),
    Column("created_at", _TS, nullable=False),
    Column("worker_incarnation_id", _uuid(), ForeignKey("worker_incarnations.id")),
    Column("lease_token", _uuid()),
    Column("lease_version", BigInteger, nullable=False),
    Column("lease_expires_at", _TS),
    Column("claimed_at", _TS),
    Column("started_at", _TS),
    Column("heartbeat_at", _TS),
    Column("exit_code", Integer),
    Column("signal", Integer),
    Column("reason", Text),
    Column("completion", JSONB),
    Column("updated_at", _TS, nullable=False),
    Column("bundle_digest", Text),
    # 0007, live logs (docs/protocols.md §4.9)
    Column("log_end", BigInteger, nullable=False),
    Column("log_window_bytes", BigInteger, nullable=False),
    Column("log_rows", Boolean, nullable=False),
    Column("log_rows_retired_at", _TS),
)

attempt_log_chunks = Table(
    "attempt_log_chunks", metadata,
    Column("attempt_id", _uuid(), ForeignKey("attempts.id"), primary_key=True),
    Column("start_offset", BigInteger, primary_key=True),
    Column("end_offset", BigInteger, nullable=False),
    Column("gap", Boolean, nullable=False),
    Column("data", LargeBinary, nullable=False),
    Column("created_at", _TS, nullable=False),
)

events = Table(
    "events", metadata,
    Column("id", _uuid(), primary_key=True),
    Column("run_id", _uuid(), ForeignKey("runs.id"), nullable=False),
    Column("attempt_id", _uuid(), ForeignKey("attempts.id")),
    Column("kind", Text, nullable=False),
    Column("from_status", Text),
    Column("to_status", Text, nullable=False),
    Column("at", _TS, nullable=False),
    Column("detail", JSONB),
)

task_events = Table(
    "task_events", metadata,
    Column("id", _uuid(), primary_key=True),
    Column("task_id", _uuid(), ForeignKey("tasks.id"), nullable=False),
    Column("kind", Text, nullable=False),
    Column("detail", JSONB, nullable=False),
    Column("at", _TS, nullable=False),
)

occurrences = Table(
    "occurrences", metadata,
    Column("id", _uuid(), primary_key=True),
    Column("task_id", _uuid(), ForeignKey("tasks.id"), nullable=False),
    Column("outcome", Text, nullable=False),
    Column("first_slot", _TS, nullable=False),
    Column("last_slot", _TS, nullable=False),
    Column("slot_count", Integer, nullable=False),
    Column("run_id", _uuid(), ForeignKey("runs.id")),
    Column("recorded_at", _TS, nullable=False),
)

api_tokens = Table(
    "api_tokens", metadata,
    Column("id", _uuid(), primary_key=True),
    Column("name", Text, nullable=False),
    Column("token_sha256", Text, nullable=False, unique=True),
    Column("scope", Text, nullable=False),
    Column("pool_id", _uuid(), ForeignKey("worker_pools.id")),
    Column("created_at", _TS, nullable=False),
    Column("revoked_at", _TS),
    Column("last_used_at", _TS),
)

run_attempt_log_artifacts = Table(
    "run_attempt_log_artifacts", metadata,
    Column("id", Text, primary_key=True),
    Column("attempt_id", _uuid(), ForeignKey("attempts.id"), nullable=False, unique=True),
    Column("project_id", _uuid(), nullable=False),
    Column("run_id", _uuid(), ForeignKey("runs.id"), nullable=False),
    Column("bucket", Text, nullable=False),
    Column("object_key", Text, nullable=False),
    Column("version_id", Text),
    Column("size_bytes", BigInteger, nullable=False),
    Column("sha256", Text, nullable=False),
    Column("content_type", Text, nullable=False),
    Column("metadata", JSONB, nullable=False),
    Column("created_at", _TS, nullable=False),
    Column("etag", Text),
    Column("layout", JSONB),  # 0007: how a capped object maps raw offsets
)

run_attempt_log_retention_controls = Table(
    "run_attempt_log_retention_controls", metadata,
    Column("attempt_id", _uuid(), ForeignKey("attempts.id"), primary_key=True),
    Column("project_id", _uuid(), nullable=False),
    Column("run_id", _uuid(), ForeignKey("runs.id"), nullable=False),
    Column("artifact_id", Text, ForeignKey("run_attempt_log_artifacts.id"), nullable=False),
    Column("bucket", Text, nullable=False),
    Column("object_key", Text, nullable=False),
    Column("version_id", Text),
    Column("size_bytes", BigInteger, nullable=False),
    Column("sha256", Text, nullable=False),
    Column("content_type", Text, nullable=False),
    Column("eligible_at", _TS, nullable=False),
    Column("state", Text, nullable=False),
    Column("due_at", _TS, nullable=False),
    Column("claim_owner", Text),
    Column("claim_token", _uuid()),
    Column("claim_version", BigInteger, nullable=False),
    Column("lease_expires_at", _TS),
    Column("failure_count", Integer, nullable=False),
    Column("last_failure_class", Text),
    Column("last_failure_at", _TS),
    Column("enrolled_at", _TS, nullable=False),
)

run_attempt_log_artifact_tombstones = Table(
    "run_attempt_log_artifact_tombstones", metadata,
    Column("attempt_id", _uuid(), ForeignKey("attempts.id"), primary_key=True),
    Column("project_id", _uuid(), nullable=False),
    Column("run_id", _uuid(), ForeignKey("runs.id"), nullable=False),
    Column("artifact_id", Text, ForeignKey("run_attempt_log_artifacts.id"), nullable=False,
           unique=True),
    Column("outcome", Text, nullable=False),
    Column("retired_at", _TS, nullable=False),
    Column("evidence", Text, nullable=False),
    Column("evidence_sha256", Text, nullable=False),
)

secret_sealing = Table(  # 0011: present = sealing is on (docs/operations.md)
    "secret_sealing", metadata,
    Column("singleton", Boolean, primary_key=True),
    Column("primary_key_id", Text, nullable=False),
    Column("enabled_by", Text, nullable=False),
    Column("enabled_at", _TS, nullable=False),
    Column("updated_at", _TS, nullable=False),
)

# 0010: the history pruning job, one row (docs/operations.md "History pruning")
history_prune_jobs = Table(
    "history_prune_jobs", metadata,
    Column("id", SmallInteger, primary_key=True),
    Column("retention_s", BigInteger, nullable=False),
    Column("keep_runs", Integer, nullable=False),
    Column("cursor_finished_at", _TS, nullable=False),
    Column("cursor_run_id", _uuid(), nullable=False),
    Column("passes", BigInteger, nullable=False),
    Column("last_batch_at", _TS),
    Column("last_batch_owner", Text),
    Column("last_batch_scanned", Integer, nullable=False),
    Column("last_batch_runs", Integer, nullable=False),
    Column("last_batch_attempts", Integer, nullable=False),
    Column("last_batch_events", Integer, nullable=False),
    Column("last_batch_occurrences", Integer, nullable=False),
    Column("last_batch_kept", Integer, nullable=False),
    Column("total_runs", BigInteger, nullable=False),
)

# 0010: orphan log object collection (docs/operations.md "Orphan log objects")
orphan_sweep_jobs = Table(
    "orphan_sweep_jobs", metadata,
    Column("id", SmallInteger, primary_key=True),
    Column("cursor_finished_at", _TS, nullable=False),
    Column("cursor_attempt_id", _uuid(), nullable=False),
    Column("lease_owner", Text),
    Column("lease_expires_at", _TS),
    Column("last_sweep_at", _TS),
)

orphan_log_objects = Table(
    "orphan_log_objects", metadata,
    Column("attempt_id", _uuid(), primary_key=True),
    Column("project_id", _uuid(), nullable=False),
    Column("run_id", _uuid(), nullable=False),
    Column("bucket", Text, nullable=False),
    Column("object_key", Text, nullable=False),
    Column("outcome", Text, nullable=False),
    Column("etag", Text),
    Column("version_id", Text),
    Column("size_bytes", BigInteger),
    Column("swept_at", _TS, nullable=False),
    Column("swept_by", Text, nullable=False),
)

# 0013: the web panel's sessions and sign-in throttle (docs/panel.md "Cluster")
panel_sessions = Table(
    "panel_sessions", metadata,
    Column("id_sha256", Text, primary_key=True),
    Column("token_id", _uuid(), ForeignKey("api_tokens.id", ondelete="CASCADE"),
           nullable=False),
    Column("csrf", Text, nullable=False),
    Column("created_at", _TS, nullable=False),
    Column("last_seen_at", _TS, nullable=False),
    Column("idle_expires_at", _TS, nullable=False),
    Column("absolute_expires_at", _TS, nullable=False),
)

panel_signin_failures = Table(
    "panel_signin_failures", metadata,
    Column("client", Text, primary_key=True),
    Column("failures", Integer, nullable=False),
    Column("last_failed_at", _TS, nullable=False),
    Column("blocked_until", _TS, nullable=False),
)

# 0016: the panel's sign-in log (docs/panel.md "Cluster", Settings)
panel_signins = Table(
    "panel_signins", metadata,
    Column("id", _uuid(), primary_key=True),
    Column("at", _TS, nullable=False),
    Column("client", Text, nullable=False),
    Column("ok", Boolean, nullable=False),
    Column("token_id", _uuid(), ForeignKey("api_tokens.id", ondelete="SET NULL")),
    Column("token_name", Text),
)

# 0017: the panel's saved views, a token name's named search and sort
panel_views = Table(
    "panel_views", metadata,
    Column("token_name", Text, primary_key=True),
    Column("name", Text, primary_key=True),
    Column("query", Text, nullable=False),
    Column("sort", Text, nullable=False),
    Column("created_at", _TS, nullable=False),
)

# 0015: run now's Idempotency-Key (docs/protocols.md §4.5); run_id has no foreign key (the
# run is inserted after the key, as its transaction's last statement)
run_request_keys = Table(
    "run_request_keys", metadata,
    Column("task_id", _uuid(), primary_key=True),
    Column("key", Text, primary_key=True),
    Column("run_id", _uuid(), nullable=False),
    Column("created_at", _TS, nullable=False),
)
