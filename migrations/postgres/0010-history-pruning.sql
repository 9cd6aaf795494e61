-- additive: true
-- Cluster history pruning (docs/operations.md "History pruning"; docs/protocols.md §4.8): runs,
-- attempts, events and occurrences older than the history retention, deleted in bounded
-- batches by whichever replica holds the job row (FOR UPDATE SKIP LOCKED).

-- Per-task override of the cluster-wide history retention (seconds); NULL: the cluster default.
ALTER TABLE tasks
    ADD COLUMN history_retention_s bigint
        CHECK (history_retention_s IS NULL OR history_retention_s >= 0);
-- The batch's horizon reads the smallest override: the first row of this index, never a scan.
CREATE INDEX tasks_history_retention_idx ON tasks (history_retention_s)
    WHERE history_retention_s IS NOT NULL;

-- The job: one row. A batch locks it with SKIP LOCKED (one pruner at a time across replicas),
-- walks terminal runs from its cursor in (finished_at, id) order and records what it did.
CREATE TABLE history_prune_jobs (
    id                     smallint PRIMARY KEY CHECK (id = 1),
    retention_s            bigint NOT NULL DEFAULT 7776000 CHECK (retention_s >= 0),  -- 90 days
    keep_runs              integer NOT NULL DEFAULT 20 CHECK (keep_runs >= 0),
    cursor_finished_at     timestamptz NOT NULL DEFAULT '-infinity',
    cursor_run_id          uuid NOT NULL DEFAULT '00000000-0000-0000-0000-000000000000',
    passes                 bigint NOT NULL DEFAULT 0,
    last_batch_at          timestamptz,
    last_batch_owner       text,
    last_batch_scanned     integer NOT NULL DEFAULT 0,
    last_batch_runs        integer NOT NULL DEFAULT 0,  -- run rows deleted
    last_batch_attempts    integer NOT NULL DEFAULT 0,
    last_batch_events      integer NOT NULL DEFAULT 0,
    last_batch_occurrences integer NOT NULL DEFAULT 0,
    last_batch_kept        integer NOT NULL DEFAULT 0,  -- tombstoned: only events/occurrences
    total_runs             bigint NOT NULL DEFAULT 0
);
INSERT INTO history_prune_jobs (id) VALUES (1);

-- The batch's walk: terminal runs by (finished_at, id), from the cursor on.
CREATE INDEX runs_finished_idx ON runs (finished_at, id) WHERE finished_at IS NOT NULL;
-- prune_occurrences walks the ledger by last slot, oldest first.
CREATE INDEX occurrences_last_slot_idx ON occurrences (last_slot);
-- Deleting a run or an attempt checks every foreign key that references it: each referencing
-- column needs an index, or each deleted row scans the referencing table.
CREATE INDEX events_attempt_idx ON events (attempt_id) WHERE attempt_id IS NOT NULL;
CREATE INDEX run_attempt_log_artifacts_run_idx ON run_attempt_log_artifacts (run_id);
CREATE INDEX run_attempt_log_retention_controls_run_idx
    ON run_attempt_log_retention_controls (run_id);
CREATE INDEX run_attempt_log_artifact_tombstones_run_idx
    ON run_attempt_log_artifact_tombstones (run_id);

-- Orphan log objects (docs/operations.md "Orphan log objects"): an attempt that ended without
-- a verified artifact may still have PUT its log (key p/<project>/wlog-<attempt>). The sweep
-- walks such attempts past their lease plus a margin, from a cursor, under the job row's lease.
CREATE TABLE orphan_sweep_jobs (
    id                  smallint PRIMARY KEY CHECK (id = 1),
    cursor_finished_at  timestamptz NOT NULL DEFAULT '-infinity',
    cursor_attempt_id   uuid NOT NULL DEFAULT '00000000-0000-0000-0000-000000000000',
    lease_owner         text,
    lease_expires_at    timestamptz,
    last_sweep_at       timestamptz
);
INSERT INTO orphan_sweep_jobs (id) VALUES (1);
-- The sweep's walk: remote attempts that ended, by (finished_at, id).
CREATE INDEX attempts_orphan_walk_idx ON attempts (finished_at, id)
    WHERE executor = 'remote_worker' AND finished_at IS NOT NULL;

-- The sweep's own evidence, one row per attempt looked at (never ADR-0379's tombstones): no
-- foreign key, identities kept as values, so history pruning is never held by it.
CREATE TABLE orphan_log_objects (
    attempt_id   uuid PRIMARY KEY,
    project_id   uuid NOT NULL,
    run_id       uuid NOT NULL,
    bucket       text NOT NULL,
    object_key   text NOT NULL,
    -- deleted: the object seen was deleted; already_absent: gone between HEAD and DELETE;
    -- absent: nothing was uploaded; changed: the object changed after HEAD (412), kept;
    -- foreign: its metadata names another attempt, kept
    outcome      text NOT NULL CHECK (outcome IN ('deleted', 'already_absent', 'absent',
                                                  'changed', 'foreign')),
    etag         text,
    version_id   text,
    size_bytes   bigint,
    swept_at     timestamptz NOT NULL DEFAULT now(),
    swept_by     text NOT NULL
);
