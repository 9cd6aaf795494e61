-- additive: true
-- Run Attempt log retention authority (ADR-0379 §2; DESIGN.md §4.3).

-- Candidate scan for the enrollment sweep: terminal, non-lost remote worker attempts.
CREATE INDEX attempts_log_retention_candidate_idx ON attempts (finished_at)
    WHERE executor = 'remote_worker'
      AND status IN ('succeeded', 'failed', 'cancelled', 'timed_out');

-- One row per attempt log still to retire: exact identity, eligibility, the claim fence,
-- the retry schedule and the last failure. Deleted when the tombstone is written.
CREATE TABLE run_attempt_log_retention_controls (
    attempt_id          uuid PRIMARY KEY REFERENCES attempts (id),
    project_id          uuid NOT NULL,
    run_id              uuid NOT NULL REFERENCES runs (id),
    artifact_id         text NOT NULL REFERENCES run_attempt_log_artifacts (id),
    bucket              text NOT NULL,
    object_key          text NOT NULL,
    version_id          text,
    size_bytes          bigint NOT NULL,
    sha256              text NOT NULL,
    content_type        text NOT NULL,
    eligible_at         timestamptz NOT NULL,
    state               text NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'manual')),
    -- when the row may next be claimed: eligibility, a retry time, or the end of a lease
    due_at              timestamptz NOT NULL,
    claim_owner         text,
    claim_token         uuid,
    claim_version       bigint NOT NULL DEFAULT 0,
    lease_expires_at    timestamptz,
    failure_count       integer NOT NULL DEFAULT 0,
    last_failure_class  text CHECK (last_failure_class IN ('artifact_unavailable',
                                    'artifact_integrity_mismatch',
                                    'retirement_record_unavailable', 'object_store_unsafe')),
    last_failure_at     timestamptz,
    enrolled_at         timestamptz NOT NULL DEFAULT now()
);

-- The partial candidate index every claim walks.
CREATE INDEX run_attempt_log_retention_controls_due_idx
    ON run_attempt_log_retention_controls (due_at) WHERE state = 'pending';

-- Finalize deletes every row it retires: vacuum early so claims do not walk dead tuples.
ALTER TABLE run_attempt_log_retention_controls SET (
    autovacuum_vacuum_scale_factor = 0.0,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0.0,
    autovacuum_vacuum_insert_threshold = 1000,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_delay = 0
);

-- Immutable evidence of a retirement: canonical JSON and its SHA-256 (ADR-0379 §2).
CREATE TABLE run_attempt_log_artifact_tombstones (
    attempt_id     uuid PRIMARY KEY REFERENCES attempts (id),
    project_id     uuid NOT NULL,
    run_id         uuid NOT NULL REFERENCES runs (id),
    artifact_id    text NOT NULL UNIQUE REFERENCES run_attempt_log_artifacts (id),
    outcome        text NOT NULL CHECK (outcome IN ('deleted', 'already_absent')),
    retired_at     timestamptz NOT NULL,
    evidence       text NOT NULL,
    evidence_sha256 text NOT NULL CHECK (evidence_sha256 ~ '^[0-9a-f]{64}$')
);
