-- Cluster history pruning (docs/operations.md "History pruning"; migration 0010). Times come
-- from now() only.

-- prune_batch_plan --
-- Pin the batch's plan in its transaction, as retention's claim_plan does: without statistics
-- the only plans left walk runs_finished_idx from the cursor and reach every other row by key;
-- JIT off: the priced-out costs would otherwise compile the plan (seconds) for a few rows
SELECT set_config('enable_sort', 'off', true), set_config('enable_hashjoin', 'off', true),
       set_config('enable_mergejoin', 'off', true), set_config('enable_seqscan', 'off', true),
       set_config('enable_bitmapscan', 'off', true), set_config('jit', 'off', true)

-- prune_batch --
-- One bounded batch: lock the job row (SKIP LOCKED: another replica holds it, nothing
-- happens), walk at most %(limit)s terminal runs past the horizon from the cursor in
-- (finished_at, id) order, judge each by key, delete what is due and move the cursor.
-- A run is due when it is terminal, older than its task's history retention (or the job's),
-- has at least keep_runs newer runs of its task, no attempt with a live lease, and no log
-- artifact without a tombstone (ADR-0379 runs first). A due run with a tombstone keeps its
-- run, attempt and artifact rows (the tombstones' foreign keys; the runtime role never deletes
-- one): only its events and occurrences go. Foreign keys are checked at the statement's end,
-- so the sibling deletes may run in any order.
WITH job AS MATERIALIZED (
    SELECT j.retention_s, j.keep_runs, j.cursor_finished_at, j.cursor_run_id
    FROM history_prune_jobs j
    WHERE j.id = 1
    FOR UPDATE SKIP LOCKED
), horizon AS MATERIALIZED (
    SELECT j.*, now() - make_interval(secs => least(j.retention_s, coalesce(
               (SELECT t.history_retention_s FROM tasks t
                WHERE t.history_retention_s IS NOT NULL
                ORDER BY t.history_retention_s LIMIT 1), j.retention_s))) AS h
    FROM job j
), scanned AS MATERIALIZED (
    SELECT r.id, r.task_id, r.status, r.finished_at
    FROM horizon z
    CROSS JOIN LATERAL (
        SELECT r.id, r.task_id, r.status, r.finished_at
        FROM runs r
        WHERE r.finished_at IS NOT NULL AND r.finished_at < z.h
          AND (r.finished_at, r.id) > (z.cursor_finished_at, z.cursor_run_id)
        ORDER BY r.finished_at, r.id
        LIMIT %(limit)s
    ) r
), judged AS MATERIALIZED (
    SELECT s.id, v.due, v.tombstoned
    FROM scanned s
    CROSS JOIN horizon z
    CROSS JOIN LATERAL (
        SELECT s.status IN ('succeeded', 'failed', 'cancelled', 'timed_out', 'lost')
               AND s.finished_at < now() - make_interval(
                   secs => coalesce(t.history_retention_s, z.retention_s))
               AND (SELECT count(*) FROM (SELECT 1 FROM runs n
                                          WHERE n.task_id = s.task_id AND n.id > s.id
                                          LIMIT z.keep_runs) newer) >= z.keep_runs
               AND NOT EXISTS (SELECT 1 FROM attempts a
                               WHERE a.run_id = s.id
                                 AND (a.status IN ('claimed', 'starting', 'running')
                                      OR a.lease_expires_at > now()))
               AND NOT EXISTS (SELECT 1 FROM attempts a
                               JOIN run_attempt_log_artifacts la ON la.attempt_id = a.id
                               WHERE a.run_id = s.id
                                 AND NOT EXISTS (
                                     SELECT 1 FROM run_attempt_log_artifact_tombstones tb
                                     WHERE tb.attempt_id = a.id)) AS due,
               EXISTS (SELECT 1 FROM attempts a
                       JOIN run_attempt_log_artifact_tombstones tb ON tb.attempt_id = a.id
                       WHERE a.run_id = s.id) AS tombstoned
        FROM tasks t
        WHERE t.id = s.task_id
        OFFSET 0
    ) v
), due AS MATERIALIZED (
    -- lock each due run before its rows go; a run another session holds (a claim, a status
    -- write, a foreign-key check of a row being added) is skipped, not waited for: the
    -- cursor moves past it and the next pass judges it again
    SELECT r.id, j.tombstoned
    FROM judged j
    JOIN runs r ON r.id = j.id
    WHERE j.due
    FOR UPDATE OF r SKIP LOCKED
), due_attempts AS MATERIALIZED (
    SELECT a.id, d.tombstoned FROM due d JOIN attempts a ON a.run_id = d.id
), del_occurrences AS (
    DELETE FROM occurrences o USING due d WHERE o.run_id = d.id RETURNING 1
), del_events AS (
    DELETE FROM events e USING due d WHERE e.run_id = d.id RETURNING 1
-- Live-log chunk rows (a partial log), tombstoned or not, like events:
), del_chunks AS (
    DELETE FROM attempt_log_chunks c USING due_attempts d WHERE c.attempt_id = d.id
    RETURNING 1
), del_notifications AS (
    -- a run's notification outcomes go with the run (never while the run row stays)
    DELETE FROM notifications n USING due d WHERE n.run_id = d.id AND NOT d.tombstoned
    RETURNING 1
), del_attempts AS (
    DELETE FROM attempts a USING due_attempts d WHERE a.id = d.id AND NOT d.tombstoned
    RETURNING 1
), del_runs AS (
    DELETE FROM runs r USING due d WHERE r.id = d.id AND NOT d.tombstoned RETURNING 1
), tally AS MATERIALIZED (
    SELECT (SELECT count(*) FROM scanned) AS scanned,
           (SELECT finished_at FROM scanned ORDER BY finished_at DESC, id DESC LIMIT 1)
               AS last_finished_at,
           (SELECT id FROM scanned ORDER BY finished_at DESC, id DESC LIMIT 1) AS last_id,
           (SELECT count(*) FROM del_runs) AS runs,
           (SELECT count(*) FROM del_attempts) AS attempts,
           (SELECT count(*) FROM del_events) AS events,
           (SELECT count(*) FROM del_occurrences) AS occurrences,
           (SELECT count(*) FROM due WHERE tombstoned) AS kept
)
UPDATE history_prune_jobs j
SET cursor_finished_at = CASE WHEN k.scanned < %(limit)s THEN '-infinity'
                              ELSE k.last_finished_at END,
    cursor_run_id = CASE WHEN k.scanned < %(limit)s
                         THEN '00000000-0000-0000-0000-000000000000'::uuid
                         ELSE k.last_id END,
    passes = j.passes + CASE WHEN k.scanned < %(limit)s THEN 1 ELSE 0 END,
    last_batch_at = now(), last_batch_owner = %(owner)s,
    last_batch_scanned = k.scanned, last_batch_runs = k.runs,
    last_batch_attempts = k.attempts, last_batch_events = k.events,
    last_batch_occurrences = k.occurrences, last_batch_kept = k.kept,
    total_runs = j.total_runs + k.runs
FROM tally k, job
WHERE j.id = 1
RETURNING k.scanned, k.runs, k.attempts, k.events, k.occurrences, k.kept

-- status --
-- The job row, the horizon and how many terminal runs are past it (an index-only count: an
-- operator's view, not a claim)
WITH z AS (
    SELECT j.*, now() - make_interval(secs => least(j.retention_s, coalesce(
               (SELECT t.history_retention_s FROM tasks t
                WHERE t.history_retention_s IS NOT NULL
                ORDER BY t.history_retention_s LIMIT 1), j.retention_s))) AS h
    FROM history_prune_jobs j WHERE j.id = 1
)
SELECT z.retention_s, z.keep_runs, z.h, z.passes, z.last_batch_at, z.last_batch_owner,
       z.last_batch_scanned, z.last_batch_runs, z.last_batch_attempts, z.last_batch_events,
       z.last_batch_occurrences, z.last_batch_kept, z.total_runs,
       (SELECT count(*) FROM runs r WHERE r.finished_at IS NOT NULL AND r.finished_at < z.h)
           AS past_horizon
FROM z

-- orphan_lease --
-- Lease the orphan sweep's job row to %(owner)s for %(lease_s)s seconds, unless another owner
-- holds an unexpired lease (or the row is locked right now: SKIP LOCKED); returns the cursor
WITH job AS MATERIALIZED (
    SELECT id FROM orphan_sweep_jobs
    WHERE id = 1
      AND (lease_expires_at IS NULL OR lease_expires_at <= now() OR lease_owner = %(owner)s)
    FOR UPDATE SKIP LOCKED
)
UPDATE orphan_sweep_jobs j
SET lease_owner = %(owner)s,
    lease_expires_at = clock_timestamp() + make_interval(secs => %(lease_s)s)
FROM job
WHERE j.id = job.id
RETURNING j.cursor_finished_at::text, j.cursor_attempt_id::text

-- orphan_walk_plan --
-- Pin the walk's plan (as prune_batch_plan): attempts_orphan_walk_idx from the cursor, the rest
-- by key
SELECT set_config('enable_sort', 'off', true), set_config('enable_hashjoin', 'off', true),
       set_config('enable_mergejoin', 'off', true), set_config('enable_seqscan', 'off', true),
       set_config('enable_bitmapscan', 'off', true), set_config('jit', 'off', true)

-- orphan_walk --
-- At most %(limit)s remote attempts that ended more than %(margin_s)s seconds ago, after the
-- cursor in (finished_at, id) order; ``orphan``: no artifact row names its log, it did not
-- complete without output (no grant, no PUT: nothing to HEAD) and the sweep has no evidence
-- for it yet (its key may hold an object nobody will ever read)
SELECT a.id::text AS attempt_id, a.finished_at, r.project_id::text, r.id::text AS run_id,
       v.orphan
FROM (SELECT id, run_id, finished_at,
             coalesce((completion ->> 'no_output')::boolean, false) AS no_output
      FROM attempts
      WHERE executor = 'remote_worker' AND finished_at IS NOT NULL
        AND finished_at < now() - make_interval(secs => %(margin_s)s)
        AND (finished_at, id) > (%(cursor_finished_at)s::timestamptz,
                                 %(cursor_attempt_id)s::uuid)
      ORDER BY finished_at, id
      LIMIT %(limit)s) a
JOIN runs r ON r.id = a.run_id
CROSS JOIN LATERAL (
    SELECT NOT a.no_output
           AND NOT EXISTS (SELECT 1 FROM run_attempt_log_artifacts la WHERE la.attempt_id = a.id)
           AND NOT EXISTS (SELECT 1 FROM orphan_log_objects o WHERE o.attempt_id = a.id)
           AS orphan
    OFFSET 0
) v
ORDER BY a.finished_at, a.id

-- orphan_record --
-- One attempt's evidence (the first sweep to record it wins)
INSERT INTO orphan_log_objects (attempt_id, project_id, run_id, bucket, object_key, outcome,
                                etag, version_id, size_bytes, swept_by)
VALUES (%(attempt_id)s, %(project_id)s, %(run_id)s, %(bucket)s, %(object_key)s, %(outcome)s,
        %(etag)s, %(version_id)s, %(size_bytes)s, %(owner)s)
ON CONFLICT (attempt_id) DO NOTHING

-- orphan_release --
-- Move the cursor and release the lease, fenced by a lease still held at this statement's clock
UPDATE orphan_sweep_jobs
SET cursor_finished_at = %(cursor_finished_at)s::timestamptz,
    cursor_attempt_id = %(cursor_attempt_id)s::uuid,
    lease_owner = NULL, lease_expires_at = NULL, last_sweep_at = now()
WHERE id = 1 AND lease_owner = %(owner)s AND lease_expires_at > clock_timestamp()
RETURNING 1

-- orphan_status --
-- Evidence by outcome
SELECT outcome, count(*) FROM orphan_log_objects GROUP BY outcome
