-- Run Attempt log retention (ADR-0379 §2–§4; docs/protocols.md §4.3). Times come from now() only.

-- enroll_run --
-- Enroll the log of every candidate attempt of one run that just became terminal
INSERT INTO run_attempt_log_retention_controls (
    attempt_id, project_id, run_id, artifact_id, bucket, object_key, version_id, size_bytes,
    sha256, content_type, eligible_at, due_at)
SELECT k.attempt_id, k.project_id, k.run_id, k.artifact_id, k.bucket, k.object_key,
       k.version_id, k.size_bytes, k.sha256, k.content_type, k.eligible_at, k.eligible_at
FROM run_attempt_log_retention_candidates k
WHERE k.run_id = %(run_id)s
ON CONFLICT (attempt_id) DO NOTHING

-- enroll_sweep --
-- Enroll at most %(limit)s missed candidates, oldest attempt first (bounded repair)
INSERT INTO run_attempt_log_retention_controls (
    attempt_id, project_id, run_id, artifact_id, bucket, object_key, version_id, size_bytes,
    sha256, content_type, eligible_at, due_at)
SELECT k.attempt_id, k.project_id, k.run_id, k.artifact_id, k.bucket, k.object_key,
       k.version_id, k.size_bytes, k.sha256, k.content_type, k.eligible_at, k.eligible_at
FROM run_attempt_log_retention_candidates k
WHERE NOT EXISTS (SELECT 1 FROM run_attempt_log_retention_controls c
                  WHERE c.attempt_id = k.attempt_id)
ORDER BY k.attempt_finished_at
LIMIT %(limit)s
ON CONFLICT (attempt_id) DO NOTHING

-- claim_plan --
-- Pin the claim's plan in its transaction: without statistics (a restore, a bulk enrollment,
-- a new replica) the planner guesses a handful of rows; with sorts, hash and merge joins,
-- sequential and bitmap scans priced out, the only plans left walk the due index in order
-- and reach every other row by key
SELECT set_config('enable_sort', 'off', true), set_config('enable_hashjoin', 'off', true),
       set_config('enable_mergejoin', 'off', true), set_config('enable_seqscan', 'off', true),
       set_config('enable_bitmapscan', 'off', true)

-- claim --
-- Lease at most %(limit)s due controls to %(owner)s. A row whose identity broke goes manual; a
-- row whose retention is not over by today's facts (the task's retention was raised after
-- enrollment) is not leased but moved to its new eligibility. ``leased`` marks the claims. The
-- lease runs from clock_timestamp(): a claim that waited on a lock still gets its full lease.
-- %(versioned_only)s: only rows with a recorded VersionId (the store ignores If-Match, so an
-- unversioned row could only fail towards manual). Bounded whatever the planner knows
-- (docs/protocols.md §4.3; claim_plan runs first): the picked rows are fixed first; the
-- identity check is a LATERAL with OFFSET 0, which PostgreSQL never pulls up into the join,
-- so it runs once per picked row; it fetches artifact, attempt, run and task by primary key
-- only and compares in the select list (a condition in WHERE could prove a partial index's
-- predicate and walk that index instead); the update re-checks state as <> 'manual' (the
-- same thing by the table's CHECK) so it reaches the rows by key, not by the due index.
WITH picked AS MATERIALIZED (
    SELECT attempt_id
    FROM run_attempt_log_retention_controls
    WHERE state = 'pending' AND due_at <= now()
      AND (NOT %(versioned_only)s OR version_id IS NOT NULL)
    ORDER BY due_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), checked AS MATERIALIZED (
    SELECT c.attempt_id, f.eligible_now IS NOT NULL AS intact,
           coalesce(f.eligible_now <= now(), false) AS ripe, f.eligible_now
    FROM picked p
    JOIN run_attempt_log_retention_controls c ON c.attempt_id = p.attempt_id
    LEFT JOIN LATERAL (
        SELECT CASE WHEN la.attempt_id = c.attempt_id
                          AND la.run_id = c.run_id AND la.project_id = c.project_id
                          AND la.bucket = c.bucket AND la.object_key = c.object_key
                          AND la.version_id IS NOT DISTINCT FROM c.version_id
                          AND la.size_bytes = c.size_bytes AND la.sha256 = c.sha256
                          AND la.content_type = c.content_type
                          AND a.run_id = c.run_id AND a.executor = 'remote_worker'
                          AND a.status IN ('succeeded', 'failed', 'cancelled', 'timed_out')
                          AND a.finished_at IS NOT NULL
                          AND r.project_id = c.project_id AND r.owner = 'runtime'
                          AND r.status IN ('succeeded', 'failed', 'cancelled', 'timed_out')
                          AND r.finished_at IS NOT NULL
                    THEN greatest(r.finished_at, a.finished_at)
                         + make_interval(secs => t.log_retention_s) END AS eligible_now
        FROM run_attempt_log_artifacts la, attempts a, runs r, tasks t
        WHERE la.id = c.artifact_id AND a.id = c.attempt_id AND r.id = c.run_id
          AND t.id = r.task_id
        OFFSET 0
    ) f ON true
)
UPDATE run_attempt_log_retention_controls AS c
SET claim_version = c.claim_version + 1,
    claim_owner = CASE WHEN k.intact AND k.ripe THEN %(owner)s END,
    claim_token = CASE WHEN k.intact AND k.ripe THEN gen_random_uuid() END,
    lease_expires_at = CASE WHEN k.intact AND k.ripe
                            THEN clock_timestamp() + make_interval(secs => %(lease_s)s) END,
    due_at = CASE WHEN NOT k.intact THEN c.due_at
                  WHEN k.ripe THEN clock_timestamp() + make_interval(secs => %(lease_s)s)
                  ELSE k.eligible_now END,
    eligible_at = CASE WHEN k.intact AND NOT k.ripe THEN k.eligible_now
                       ELSE c.eligible_at END,
    state = CASE WHEN k.intact THEN c.state ELSE 'manual' END,
    last_failure_class = CASE WHEN k.intact THEN c.last_failure_class
                              ELSE 'artifact_integrity_mismatch' END,
    last_failure_at = CASE WHEN k.intact THEN c.last_failure_at ELSE now() END
FROM checked k
WHERE c.attempt_id = k.attempt_id
  AND c.state <> 'manual' AND c.due_at <= now() AND c.eligible_at <= now()
  AND (c.lease_expires_at IS NULL OR c.lease_expires_at <= now())
RETURNING k.intact AND k.ripe AS leased, c.attempt_id::text, c.project_id::text,
          c.run_id::text, c.artifact_id, c.bucket, c.object_key, c.version_id, c.size_bytes,
          c.sha256, c.content_type, c.claim_owner, c.claim_token::text, c.claim_version,
          c.lease_expires_at, c.failure_count

-- lock_control --
-- Lock one control by primary key (plain FOR UPDATE, never SKIP LOCKED) with the facts its
-- fence checks: the claim, the statuses, and the artifact record the claim must still match
SELECT now() AS db_now, c.project_id::text, c.run_id::text, c.state,
       c.claim_owner, c.claim_token::text, c.claim_version, c.lease_expires_at,
       r.status AS run_status, a.status AS attempt_status,
       la.id AS la_id, la.bucket AS la_bucket, la.object_key AS la_object_key,
       la.version_id AS la_version_id, la.size_bytes AS la_size_bytes, la.sha256 AS la_sha256,
       la.content_type AS la_content_type
FROM run_attempt_log_retention_controls c
LEFT JOIN runs r ON r.id = c.run_id
LEFT JOIN attempts a ON a.id = c.attempt_id AND a.run_id = c.run_id
LEFT JOIN run_attempt_log_artifacts la ON la.id = c.artifact_id AND la.attempt_id = c.attempt_id
WHERE c.attempt_id = %(attempt_id)s
FOR UPDATE OF c

-- retire_control --
-- Delete the retired control, fenced by its claim version and by a lease still live at this
-- statement's clock (the lock wait may have outlived it), and insert the immutable
-- retirement evidence (qinglong/run-attempt-log-retirement@v1) only if the delete happened
WITH retired AS (
    DELETE FROM run_attempt_log_retention_controls
    WHERE attempt_id = %(attempt_id)s AND claim_version = %(claim_version)s
      AND lease_expires_at > clock_timestamp()
    RETURNING attempt_id
)
INSERT INTO run_attempt_log_artifact_tombstones (
    attempt_id, project_id, run_id, artifact_id, outcome, retired_at, evidence, evidence_sha256)
SELECT attempt_id, %(project_id)s::uuid, %(run_id)s::uuid, %(artifact_id)s::text,
       %(outcome)s::text, %(retired_at)s::timestamptz, %(evidence)s::text,
       %(evidence_sha256)s::text
FROM retired

-- get_tombstone --
-- The tombstone of one attempt, if any
SELECT attempt_id, project_id, run_id, artifact_id, outcome, retired_at, evidence,
       evidence_sha256
FROM run_attempt_log_artifact_tombstones
WHERE attempt_id = %(attempt_id)s

-- record_failure --
-- Release the claim with a failure class and the next due time (or manual)
UPDATE run_attempt_log_retention_controls
SET claim_owner = NULL, claim_token = NULL, lease_expires_at = NULL,
    claim_version = claim_version + 1,
    failure_count = failure_count + 1,
    last_failure_class = %(failure_class)s,
    last_failure_at = now(),
    state = CASE WHEN failure_count + 1 >= %(manual_after)s::bigint THEN 'manual'
                 ELSE 'pending' END,
    due_at = now() + make_interval(secs => %(delay_s)s)
WHERE attempt_id = %(attempt_id)s AND claim_version = %(claim_version)s
  AND claim_token = %(claim_token)s AND claim_owner = %(claim_owner)s
  AND state = 'pending' AND lease_expires_at > clock_timestamp()
RETURNING state, failure_count, due_at

-- status_counts --
-- Controls by state (leased = pending under an unexpired lease) and tombstones by outcome
SELECT 'control' AS kind,
       CASE WHEN state = 'pending' AND lease_expires_at > now() THEN 'leased' ELSE state END
           AS name,
       count(*) AS n
FROM run_attempt_log_retention_controls GROUP BY 2
UNION ALL
SELECT 'tombstone', outcome, count(*) FROM run_attempt_log_artifact_tombstones GROUP BY 2

-- status_manual --
-- The controls that wait for an operator, oldest failure first (at most %(limit)s)
SELECT attempt_id, artifact_id, failure_count, last_failure_class, last_failure_at
FROM run_attempt_log_retention_controls
WHERE state = 'manual'
ORDER BY last_failure_at NULLS FIRST, attempt_id
LIMIT %(limit)s

-- retry_controls --
-- Make the given manual or failed controls due (now, or at their eligibility if later: a
-- retry never makes a row claimable early) and reset their failure count (operator retry)
UPDATE run_attempt_log_retention_controls
SET state = 'pending', failure_count = 0, due_at = greatest(now(), eligible_at),
    claim_owner = NULL, claim_token = NULL, lease_expires_at = NULL,
    claim_version = claim_version + 1
WHERE attempt_id = ANY(%(attempt_ids)s::uuid[])
  AND (state = 'manual'
       OR (failure_count > 0 AND (lease_expires_at IS NULL OR lease_expires_at <= now())))
RETURNING attempt_id

-- read_log_state --
-- The recorded log artifact of one attempt and its tombstone, if any (read path, §4.4)
SELECT la.id AS artifact_id, la.project_id, la.run_id, la.bucket, la.object_key,
       la.version_id, la.size_bytes, la.sha256, la.content_type,
       tb.attempt_id AS tb_attempt_id, tb.project_id AS tb_project_id, tb.run_id AS tb_run_id,
       tb.artifact_id AS tb_artifact_id, tb.outcome AS tb_outcome,
       tb.retired_at AS tb_retired_at, tb.evidence AS tb_evidence,
       tb.evidence_sha256 AS tb_evidence_sha256
FROM run_attempt_log_artifacts la
LEFT JOIN run_attempt_log_artifact_tombstones tb ON tb.attempt_id = la.attempt_id
WHERE la.attempt_id = %(attempt_id)s
