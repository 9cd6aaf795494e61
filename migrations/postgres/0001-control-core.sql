-- additive: true
-- Control core for the cluster profile (DESIGN.md §2, §4.1): tasks, runs, attempts, events and
-- the log artifacts remote workers upload. Minimal: only what log retention (ADR-0379) reads.

CREATE TABLE tasks (
    id               uuid PRIMARY KEY,
    project_id       uuid NOT NULL,
    name             text NOT NULL,
    log_retention_s  bigint NOT NULL CHECK (log_retention_s >= 0),
    created_at       timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE runs (
    id           uuid PRIMARY KEY,
    project_id   uuid NOT NULL,
    task_id      uuid NOT NULL REFERENCES tasks (id),
    owner        text NOT NULL CHECK (owner IN ('runtime', 'legacy')),
    status       text NOT NULL CHECK (status IN ('queued', 'dispatching', 'running', 'succeeded',
                                                 'failed', 'cancelled', 'timed_out', 'lost')),
    version      bigint NOT NULL DEFAULT 0,
    finished_at  timestamptz,
    created_at   timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE attempts (
    id           uuid PRIMARY KEY,
    run_id       uuid NOT NULL REFERENCES runs (id),
    number       integer NOT NULL CHECK (number >= 1),
    executor     text NOT NULL CHECK (executor IN ('local_process', 'remote_worker')),
    status       text NOT NULL CHECK (status IN ('claimed', 'starting', 'running', 'succeeded',
                                                 'failed', 'cancelled', 'timed_out', 'lost')),
    version      bigint NOT NULL DEFAULT 0,
    finished_at  timestamptz,
    created_at   timestamptz NOT NULL DEFAULT now(),
    UNIQUE (run_id, number)
);

-- Append-only history: one row per run or attempt transition, in the transition's transaction.
CREATE TABLE events (
    id           uuid PRIMARY KEY,
    run_id       uuid NOT NULL REFERENCES runs (id),
    attempt_id   uuid REFERENCES attempts (id),
    kind         text NOT NULL,
    from_status  text,
    to_status    text NOT NULL,
    at           timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX events_run_idx ON events (run_id, at);

-- One uploaded log object per attempt (DESIGN.md §4.2): the facts we wrote and verify later.
CREATE TABLE run_attempt_log_artifacts (
    id            text PRIMARY KEY CHECK (id ~ '^wlog-[0-9a-f-]{36}$'),
    attempt_id    uuid NOT NULL UNIQUE REFERENCES attempts (id),
    project_id    uuid NOT NULL,
    run_id        uuid NOT NULL REFERENCES runs (id),
    bucket        text NOT NULL,
    object_key    text NOT NULL,
    version_id    text,
    size_bytes    bigint NOT NULL CHECK (size_bytes >= 0),
    sha256        text NOT NULL CHECK (sha256 ~ '^[0-9a-f]{64}$'),
    content_type  text NOT NULL,
    metadata      jsonb NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now()
);
