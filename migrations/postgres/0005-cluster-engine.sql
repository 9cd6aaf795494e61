-- additive: true
-- The cluster engine (DESIGN.md §4.2, §4.5): task definitions, next fire times, the occurrence
-- ledger, dispatch leases on attempts, worker pools and incarnations, API tokens. Every new
-- column is nullable or has a default, so rows written by 0001–0004 and replicas of that
-- release keep working (expand only).

-- Task definitions: what the local profile has. Exactly one of argv (a JSON array of strings)
-- or shell (a command line run by /bin/sh -c) for tasks created by this release; rows of older
-- releases (retention tests, imports) may have neither and are never scheduled or claimed.
ALTER TABLE tasks
    ADD COLUMN argv                jsonb CHECK (argv IS NULL OR jsonb_typeof(argv) = 'array'),
    ADD COLUMN shell               text,
    ADD COLUMN schedule            text,                     -- 5/6-field cron, @once; NULL: manual only
    ADD COLUMN timezone            text NOT NULL DEFAULT 'UTC',
    -- {"NAME": {"value": "...", "secret": true|false}}: secret values never leave the API
    ADD COLUMN env                 jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(env) = 'object'),
    ADD COLUMN cwd                 text,
    ADD COLUMN timeout_s           integer CHECK (timeout_s IS NULL OR timeout_s > 0),
    ADD COLUMN max_attempts        integer NOT NULL DEFAULT 1 CHECK (max_attempts BETWEEN 1 AND 100),
    ADD COLUMN retry_backoff_ms    integer NOT NULL DEFAULT 10000 CHECK (retry_backoff_ms >= 0),
    ADD COLUMN retry_backoff_cap_ms integer NOT NULL DEFAULT 600000 CHECK (retry_backoff_cap_ms >= 0),
    ADD COLUMN concurrency_policy  text NOT NULL DEFAULT 'forbid'
        CHECK (concurrency_policy IN ('forbid', 'allow', 'replace')),
    ADD COLUMN catchup_grace_s     integer NOT NULL DEFAULT 60 CHECK (catchup_grace_s >= 0),
    ADD COLUMN labels              jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(labels) = 'object'),
    ADD COLUMN log_limit_bytes     bigint NOT NULL DEFAULT 16777216 CHECK (log_limit_bytes > 0),
    ADD COLUMN enabled             boolean NOT NULL DEFAULT true,
    ADD COLUMN bundle_digest       text CHECK (bundle_digest IS NULL OR bundle_digest ~ '^[0-9a-f]{64}$'),
    ADD COLUMN entry_point         text,
    -- the next slot the scheduler will fire (UTC); NULL: nothing scheduled (disabled, manual)
    ADD COLUMN next_fire_at        timestamptz,
    -- compare-and-set fence for next_fire_at: bumped by every replica's advance and every edit
    ADD COLUMN schedule_version    bigint NOT NULL DEFAULT 0,
    ADD COLUMN run_counter         bigint NOT NULL DEFAULT 0,  -- last run number handed out
    ADD COLUMN version             bigint NOT NULL DEFAULT 0,
    ADD COLUMN updated_at          timestamptz NOT NULL DEFAULT now(),
    ADD COLUMN deleted_at          timestamptz;               -- removed: history stays readable

-- A live task's name is unique per project; a removed one frees its name.
CREATE UNIQUE INDEX tasks_live_name_idx ON tasks (project_id, name) WHERE deleted_at IS NULL;
-- The scheduler's only read of tasks: what is due, never a scan.
CREATE INDEX tasks_next_fire_idx ON tasks (next_fire_at)
    WHERE next_fire_at IS NOT NULL AND enabled AND deleted_at IS NULL;

ALTER TABLE runs
    ADD COLUMN number               bigint,                   -- per task: backup#42
    ADD COLUMN trigger              text NOT NULL DEFAULT 'schedule'
        CHECK (trigger IN ('schedule', 'manual', 'boot')),
    ADD COLUMN scheduled_for        timestamptz,              -- the slot; NULL for manual runs
    ADD COLUMN not_before           timestamptz NOT NULL DEFAULT now(),  -- retry backoff
    ADD COLUMN attempt_count        integer NOT NULL DEFAULT 0,
    ADD COLUMN cancel_requested_at  timestamptz,
    ADD COLUMN started_at           timestamptz,
    ADD COLUMN exit_code            integer,
    ADD COLUMN updated_at           timestamptz NOT NULL DEFAULT now();

-- At most one run per (task, scheduled slot), whatever the number of replicas ticking.
CREATE UNIQUE INDEX runs_task_slot_idx ON runs (task_id, scheduled_for)
    WHERE scheduled_for IS NOT NULL;
CREATE UNIQUE INDEX runs_task_number_idx ON runs (task_id, number) WHERE number IS NOT NULL;
-- Dispatch reads queued runs in order of their due time.
CREATE INDEX runs_queued_idx ON runs (not_before, id) WHERE status = 'queued';
-- The concurrency policy's "is a run of this task active?".
CREATE INDEX runs_active_by_task_idx ON runs (task_id)
    WHERE status IN ('queued', 'dispatching', 'running');
CREATE INDEX runs_task_created_idx ON runs (task_id, id);
CREATE INDEX runs_status_id_idx ON runs (status, id);

-- Worker pools: a worker token belongs to one; its labels bound what its workers may claim.
CREATE TABLE worker_pools (
    id          uuid PRIMARY KEY,
    name        text NOT NULL UNIQUE CHECK (name ~ '^[a-z0-9][a-z0-9_.-]{0,62}$'),
    labels      jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(labels) = 'object'),
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- One row per worker process start (name + a random id): an owner is an incarnation, never a
-- reusable name; recovering its attempts never needs this row (the lease is on the attempt).
CREATE TABLE worker_incarnations (
    id                 uuid PRIMARY KEY,
    pool_id            uuid NOT NULL REFERENCES worker_pools (id),
    name               text NOT NULL,
    labels             jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(labels) = 'object'),
    concurrency        integer NOT NULL CHECK (concurrency BETWEEN 1 AND 1024),
    started_at         timestamptz NOT NULL DEFAULT now(),
    last_seen_at       timestamptz NOT NULL DEFAULT now(),
    stopped_at         timestamptz
);
CREATE INDEX worker_incarnations_name_idx ON worker_incarnations (name, started_at);

-- The dispatch lease (DESIGN.md §4.2): (lease_token, lease_version) change only at a claim;
-- heartbeats move lease_expires_at (database time).
ALTER TABLE attempts
    ADD COLUMN worker_incarnation_id uuid REFERENCES worker_incarnations (id),
    ADD COLUMN lease_token           uuid,
    ADD COLUMN lease_version         bigint NOT NULL DEFAULT 0,
    ADD COLUMN lease_expires_at      timestamptz,
    ADD COLUMN claimed_at            timestamptz,
    ADD COLUMN started_at            timestamptz,             -- the worker reported the process started
    ADD COLUMN heartbeat_at          timestamptz,
    ADD COLUMN exit_code             integer,
    ADD COLUMN signal                integer,
    -- why it ended as it did: not_started, lease_expired, timeout, cancelled, worker_drain, ...
    ADD COLUMN reason                text,
    -- the worker's completion as it was applied, to answer a replay exactly as the first time
    ADD COLUMN completion            jsonb,
    ADD COLUMN updated_at            timestamptz NOT NULL DEFAULT now();

-- The recovery sweep's read: live remote leases by expiry.
CREATE INDEX attempts_lease_expiry_idx ON attempts (lease_expires_at)
    WHERE executor = 'remote_worker' AND status IN ('claimed', 'starting', 'running');
CREATE INDEX attempts_run_idx ON attempts (run_id, number);

-- Task history: edits (field names, never secret values), enable/disable, removal.
CREATE TABLE task_events (
    id          uuid PRIMARY KEY,
    task_id     uuid NOT NULL REFERENCES tasks (id),
    kind        text NOT NULL,
    detail      jsonb NOT NULL DEFAULT '{}',
    at          timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX task_events_task_idx ON task_events (task_id, at);

ALTER TABLE events ADD COLUMN detail jsonb;

-- What S3 reported for an uploaded log at completion (HEAD by control): the ETag beside the
-- VersionId 0001 already records.
ALTER TABLE run_attempt_log_artifacts ADD COLUMN etag text;

-- The occurrence ledger: every slot of an enabled task has an outcome. Consecutive slots with
-- one skip outcome are one row (first_slot, last_slot, slot_count); run_created rows name
-- their run. Pruned with run history.
CREATE TABLE occurrences (
    id           uuid PRIMARY KEY,
    task_id      uuid NOT NULL REFERENCES tasks (id),
    outcome      text NOT NULL CHECK (outcome IN ('run_created', 'skipped_active',
                      'skipped_downtime', 'backlog_full', 'skipped_disabled')),
    first_slot   timestamptz NOT NULL,
    last_slot    timestamptz NOT NULL CHECK (last_slot >= first_slot),
    slot_count   integer NOT NULL DEFAULT 1 CHECK (slot_count >= 1),
    run_id       uuid REFERENCES runs (id),
    recorded_at  timestamptz NOT NULL DEFAULT now(),
    CHECK ((outcome = 'run_created') = (run_id IS NOT NULL))
);
CREATE INDEX occurrences_task_slot_idx ON occurrences (task_id, last_slot);
-- one ledger row per created run: a replayed insert cannot count a slot twice
CREATE UNIQUE INDEX occurrences_run_idx ON occurrences (run_id) WHERE run_id IS NOT NULL;

-- API tokens: random 256-bit values, stored only as their SHA-256. Worker tokens name a pool.
CREATE TABLE api_tokens (
    id            uuid PRIMARY KEY,
    name          text NOT NULL,
    token_sha256  text NOT NULL UNIQUE CHECK (token_sha256 ~ '^[0-9a-f]{64}$'),
    scope         text NOT NULL CHECK (scope IN ('admin', 'operator', 'viewer', 'worker')),
    pool_id       uuid REFERENCES worker_pools (id),
    created_at    timestamptz NOT NULL DEFAULT now(),
    revoked_at    timestamptz,
    last_used_at  timestamptz,
    CHECK ((scope = 'worker') = (pool_id IS NOT NULL))
);
