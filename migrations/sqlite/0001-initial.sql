-- 0001-initial: tasks, runs, attempts, events, the receipt cleanup journal (ADR-0069 §3).
-- Times are integer Unix milliseconds. Every status change bumps `version` (compare-and-set).

CREATE TABLE settings (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
) STRICT;

CREATE TABLE tasks (
    id                  TEXT PRIMARY KEY,
    name                TEXT NOT NULL,
    argv_json           TEXT NOT NULL,
    schedule            TEXT NOT NULL,
    timezone            TEXT NOT NULL,
    env_json            TEXT NOT NULL DEFAULT '{}',
    cwd                 TEXT,
    timeout_ms          INTEGER CHECK (timeout_ms IS NULL OR timeout_ms > 0),
    max_attempts        INTEGER NOT NULL DEFAULT 1 CHECK (max_attempts BETWEEN 1 AND 100),
    concurrency         TEXT NOT NULL DEFAULT 'forbid'
                        CHECK (concurrency IN ('forbid', 'allow', 'replace')),
    log_retention_days  INTEGER CHECK (log_retention_days IS NULL OR log_retention_days > 0),
    labels_json         TEXT NOT NULL DEFAULT '[]',
    enabled             INTEGER NOT NULL DEFAULT 1 CHECK (enabled IN (0, 1)),
    misfire_grace_ms    INTEGER NOT NULL DEFAULT 60000 CHECK (misfire_grace_ms >= 0),
    schedule_cursor_ms  INTEGER,
    version             INTEGER NOT NULL DEFAULT 1,
    created_at_ms       INTEGER NOT NULL,
    updated_at_ms       INTEGER NOT NULL,
    deleted_at_ms       INTEGER
) STRICT;

CREATE UNIQUE INDEX tasks_live_name ON tasks (name) WHERE deleted_at_ms IS NULL;

CREATE TABLE runs (
    id                TEXT PRIMARY KEY,
    task_id           TEXT NOT NULL REFERENCES tasks (id),
    owner             TEXT NOT NULL DEFAULT 'runtime' CHECK (owner IN ('runtime', 'legacy')),
    trigger           TEXT NOT NULL CHECK (trigger IN ('schedule', 'manual', 'boot')),
    status            TEXT NOT NULL CHECK (status IN ('queued', 'dispatching', 'running',
                          'succeeded', 'failed', 'cancelled', 'timed_out', 'lost')),
    version           INTEGER NOT NULL DEFAULT 1,
    scheduled_at_ms   INTEGER,
    not_before_ms     INTEGER NOT NULL,
    cancel_requested  INTEGER NOT NULL DEFAULT 0 CHECK (cancel_requested IN (0, 1)),
    exit_code         INTEGER,
    signal            INTEGER,
    created_at_ms     INTEGER NOT NULL,
    updated_at_ms     INTEGER NOT NULL,
    finished_at_ms    INTEGER
) STRICT;

-- DESIGN.md §3.7: a run is created at most once per (task, scheduled time).
CREATE UNIQUE INDEX runs_task_slot ON runs (task_id, scheduled_at_ms)
    WHERE scheduled_at_ms IS NOT NULL;
CREATE INDEX runs_task_created ON runs (task_id, id);
CREATE INDEX runs_queued ON runs (not_before_ms, id) WHERE status = 'queued';
-- ADR-0067 §2: startup candidates, ordered by run id.
CREATE INDEX runs_recovery_candidates ON runs (id)
    WHERE owner = 'runtime' AND status IN ('dispatching', 'running');

CREATE TABLE attempts (
    id                  TEXT PRIMARY KEY,
    run_id              TEXT NOT NULL REFERENCES runs (id),
    number              INTEGER NOT NULL CHECK (number >= 1),
    executor            TEXT NOT NULL CHECK (executor IN ('local_process', 'remote_worker')),
    status              TEXT NOT NULL CHECK (status IN ('claimed', 'starting', 'running',
                            'succeeded', 'failed', 'cancelled', 'timed_out', 'lost')),
    version             INTEGER NOT NULL DEFAULT 1,
    handle              TEXT,
    log_path            TEXT,
    deadline_at_ms      INTEGER,
    exit_code           INTEGER,
    signal              INTEGER,
    wait_status         INTEGER,
    start_intent_at_ms  INTEGER,
    started_at_ms       INTEGER,
    finished_at_ms      INTEGER,
    created_at_ms       INTEGER NOT NULL,
    updated_at_ms       INTEGER NOT NULL,
    UNIQUE (run_id, number)
) STRICT;

CREATE INDEX attempts_active ON attempts (run_id)
    WHERE status IN ('claimed', 'starting', 'running');

CREATE TABLE events (
    id           TEXT PRIMARY KEY,
    at_ms        INTEGER NOT NULL,
    kind         TEXT NOT NULL,
    task_id      TEXT,
    run_id       TEXT,
    attempt_id   TEXT,
    from_status  TEXT,
    to_status    TEXT,
    detail       TEXT
) STRICT;

CREATE INDEX events_run ON events (run_id, id) WHERE run_id IS NOT NULL;
CREATE INDEX events_task ON events (task_id, id) WHERE task_id IS NOT NULL;

-- ADR-0069 §3: the receipt cleanup journal, part of the run database.
CREATE TABLE local_completion_receipt_journal (
    attempt_id       TEXT PRIMARY KEY REFERENCES attempts (id),
    run_id           TEXT NOT NULL REFERENCES runs (id),
    state            TEXT NOT NULL CHECK (state IN ('pending', 'quarantined')),
    receipt_path     TEXT NOT NULL,
    quarantine_path  TEXT,
    purge_at_ms      INTEGER,
    created_at_ms    INTEGER NOT NULL,
    updated_at_ms    INTEGER NOT NULL
) STRICT;

CREATE INDEX local_completion_receipt_journal_page
    ON local_completion_receipt_journal (updated_at_ms, attempt_id);
