-- Remote dispatch with fenced leases (docs/protocols.md §4.2). Times come from now() only: a lease
-- is live while lease_expires_at > now() on the database clock, never a replica's clock.
-- Every write after the claim is a compare-and-set on (attempt id, lease token, lease
-- version), a live status, an unexpired lease and the caller's pool.

-- register_incarnation --
-- A worker process start: a new incarnation (never keyed by its reusable name)
INSERT INTO worker_incarnations (id, pool_id, name, labels, concurrency)
VALUES (CAST(%(id)s AS uuid), CAST(%(pool_id)s AS uuid), %(name)s, CAST(%(labels)s AS jsonb), %(concurrency)s)

-- stop_incarnation --
-- The worker finished draining; a second call changes nothing
UPDATE worker_incarnations
SET stopped_at = coalesce(stopped_at, now()), last_seen_at = now()
WHERE id = CAST(%(id)s AS uuid) AND pool_id = CAST(%(pool_id)s AS uuid)
RETURNING id

-- touch_incarnation --
-- A live incarnation of the caller's pool asks for work: remember when it was seen
UPDATE worker_incarnations
SET last_seen_at = now()
WHERE id = CAST(%(id)s AS uuid) AND pool_id = CAST(%(pool_id)s AS uuid) AND stopped_at IS NULL
RETURNING id

-- pick_runs_plan --
-- Pin pick_runs' plan for the rest of this transaction (docs/protocols.md §4.3): without
-- statistics (a restore, a bulk load, a new replica) the planner guesses a handful of queued
-- runs and would read and sort every one; with sorts, hash and merge joins, sequential and
-- bitmap scans priced out, the only plan left walks runs_queued_idx in order and looks each
-- task up by key, stopping at %(limit)s. What follows pick_runs in the transaction reads by
-- key only.
SELECT set_config('enable_sort', 'off', true), set_config('enable_hashjoin', 'off', true),
       set_config('enable_mergejoin', 'off', true), set_config('enable_seqscan', 'off', true),
       set_config('enable_bitmapscan', 'off', true)

-- pick_runs --
-- Lock at most %(limit)s due queued runs this incarnation may run (task labels within its
-- labels and its pool's); SKIP LOCKED inside a MATERIALIZED CTE so the LIMIT holds (§4.3 step 1).
-- Each run's task is a LATERAL with OFFSET 0 (never pulled up: one lookup per run) that
-- fetches the task by key only and judges it in the select list (a condition in WHERE could
-- prove tasks_live_name_idx's predicate and walk that whole index per run)
WITH inc AS MATERIALIZED (
    SELECT i.labels AS labels, p.labels AS pool_labels
    FROM worker_incarnations i JOIN worker_pools p ON p.id = i.pool_id
    WHERE i.id = CAST(%(incarnation_id)s AS uuid) AND i.pool_id = CAST(%(pool_id)s AS uuid) AND i.stopped_at IS NULL
), picked AS MATERIALIZED (
    SELECT r.id, r.task_id, t.concurrency_policy
    FROM runs r
    CROSS JOIN inc
    JOIN LATERAL (
        SELECT t.concurrency_policy,
               t.deleted_at IS NULL
               AND (t.argv IS NOT NULL OR t.shell IS NOT NULL OR t.bundle_digest IS NOT NULL)
               AND t.labels <@ inc.labels AND t.labels <@ inc.pool_labels AS runnable
        FROM tasks t
        WHERE t.id = r.task_id
        OFFSET 0
    ) t ON t.runnable
    WHERE r.status = 'queued' AND r.not_before <= now() AND r.owner = 'runtime'
      AND (t.concurrency_policy <> 'replace' OR NOT EXISTS (
            SELECT 1 FROM runs o
            WHERE o.task_id = r.task_id AND o.status IN ('dispatching', 'running')))
    ORDER BY r.not_before, r.id
    LIMIT %(limit)s
    FOR UPDATE OF r SKIP LOCKED
)
SELECT id::text AS run_id, task_id::text AS task_id, concurrency_policy FROM picked

-- lock_replace_tasks --
-- Serialize claims of one 'replace' task: whoever holds the task row claims; the next
-- statement's fresh snapshot then sees any claim committed before this lock was taken
SELECT id::text AS task_id FROM tasks
WHERE id = ANY(CAST(%(task_ids)s AS uuid[]))
FOR NO KEY UPDATE SKIP LOCKED

-- claim_run --
-- One picked run -> dispatching with a new attempt holding a new lease (token, version 1),
-- both events; a 'replace' task's run only while no other run of the task is active
WITH run AS (
    UPDATE runs r
    SET status = 'dispatching', attempt_count = r.attempt_count + 1, version = r.version + 1,
        updated_at = now()
    FROM tasks t
    WHERE r.id = CAST(%(run_id)s AS uuid) AND r.status = 'queued' AND t.id = r.task_id
      AND (t.concurrency_policy <> 'replace' OR NOT EXISTS (
            SELECT 1 FROM runs o
            WHERE o.task_id = r.task_id AND o.id <> r.id
              AND o.status IN ('dispatching', 'running')))
    RETURNING r.id, r.task_id, r.number, r.attempt_count, t.name, t.argv, t.shell, t.env,
              t.sealed_env, t.cwd, t.timeout_s, t.log_limit_bytes, t.bundle_digest, t.entry_point
), attempt AS (
    INSERT INTO attempts (id, run_id, number, executor, status, worker_incarnation_id,
                          lease_token, lease_version, lease_expires_at, claimed_at,
                          bundle_digest)
    SELECT CAST(%(attempt_id)s AS uuid), run.id, run.attempt_count, 'remote_worker', 'claimed',
           CAST(%(incarnation_id)s AS uuid), gen_random_uuid(), 1,
           now() + make_interval(secs => %(lease_s)s), now(), run.bundle_digest
    FROM run
    RETURNING id, lease_token, lease_version, number
), events AS (
    INSERT INTO events (id, run_id, attempt_id, kind, from_status, to_status)
    SELECT CAST(%(run_event_id)s AS uuid), run.id, attempt.id, 'run_dispatching', 'queued', 'dispatching'
    FROM run, attempt
    UNION ALL
    SELECT CAST(%(attempt_event_id)s AS uuid), run.id, attempt.id, 'attempt_claimed', NULL, 'claimed'
    FROM run, attempt
)
SELECT attempt.id::text AS attempt_id, attempt.lease_token::text AS lease_token,
       attempt.lease_version, attempt.number AS attempt_number, run.id::text AS run_id,
       run.task_id::text AS task_id, coalesce(run.number, 0) AS run_number, run.name,
       run.argv, run.shell, run.env, run.sealed_env, run.cwd, run.timeout_s,
       run.log_limit_bytes, run.bundle_digest, run.entry_point
FROM run, attempt

-- lease_bundle --
-- The bundle a live lease of the caller's pool was claimed with, and its object (none when
-- the lease is not live, the attempt names no bundle, or the bundle was removed)
SELECT b.digest, b.object_key, b.size_bytes
FROM attempts a
JOIN worker_incarnations i ON i.id = a.worker_incarnation_id
JOIN script_bundles b ON b.digest = a.bundle_digest
WHERE a.id = CAST(%(attempt_id)s AS uuid) AND a.lease_token = CAST(%(lease_token)s AS uuid)
  AND a.lease_version = %(lease_version)s AND i.pool_id = CAST(%(pool_id)s AS uuid)
  AND a.status IN ('claimed', 'starting', 'running') AND a.lease_expires_at > now()
  AND a.bundle_digest = %(digest)s

-- lease_state --
-- The attempt behind a lease triple of the caller's pool, whatever its status
SELECT a.id::text AS attempt_id, a.run_id::text AS run_id, r.project_id::text AS project_id,
       r.task_id::text AS task_id, a.number, a.status, a.started_at IS NOT NULL AS started,
       a.lease_expires_at > now() AS live, a.completion, a.log_end, r.status AS run_status,
       r.cancel_requested_at IS NOT NULL AS cancel, t.max_attempts, t.retry_backoff_ms,
       t.retry_backoff_cap_ms, t.concurrency_policy
FROM attempts a
JOIN worker_incarnations i ON i.id = a.worker_incarnation_id
JOIN runs r ON r.id = a.run_id
JOIN tasks t ON t.id = r.task_id
WHERE a.id = CAST(%(attempt_id)s AS uuid) AND a.lease_token = CAST(%(lease_token)s AS uuid)
  AND a.lease_version = %(lease_version)s AND i.pool_id = CAST(%(pool_id)s AS uuid)

-- started --
-- claimed -> running on a live lease (which it renews); run dispatching -> running; events
WITH attempt AS (
    UPDATE attempts a
    SET status = 'running', started_at = now(), heartbeat_at = now(),
        lease_expires_at = now() + make_interval(secs => %(lease_s)s),
        version = a.version + 1, updated_at = now()
    FROM worker_incarnations i
    WHERE a.id = CAST(%(attempt_id)s AS uuid) AND a.lease_token = CAST(%(lease_token)s AS uuid)
      AND a.lease_version = %(lease_version)s AND a.status IN ('claimed', 'starting')
      AND a.lease_expires_at > now()
      AND i.id = a.worker_incarnation_id AND i.pool_id = CAST(%(pool_id)s AS uuid)
    RETURNING a.id, a.run_id
), run AS (
    UPDATE runs r
    SET status = 'running', started_at = coalesce(r.started_at, now()),
        version = r.version + 1, updated_at = now()
    FROM attempt
    WHERE r.id = attempt.run_id AND r.status = 'dispatching'
    RETURNING r.id
), events AS (
    INSERT INTO events (id, run_id, attempt_id, kind, from_status, to_status)
    SELECT CAST(%(attempt_event_id)s AS uuid), attempt.run_id, attempt.id, 'attempt_running', 'claimed',
           'running'
    FROM attempt
    UNION ALL
    SELECT CAST(%(run_event_id)s AS uuid), run.id, attempt.id, 'run_running', 'dispatching', 'running'
    FROM run, attempt
)
SELECT attempt.id::text AS attempt_id FROM attempt

-- heartbeat --
-- Renew a live lease by %(lease_s)s from now(); answer whether a cancel was requested
WITH attempt AS (
    UPDATE attempts a
    SET lease_expires_at = now() + make_interval(secs => %(lease_s)s), heartbeat_at = now(),
        updated_at = now()
    FROM worker_incarnations i
    WHERE a.id = CAST(%(attempt_id)s AS uuid) AND a.lease_token = CAST(%(lease_token)s AS uuid)
      AND a.lease_version = %(lease_version)s
      AND a.status IN ('claimed', 'starting', 'running') AND a.lease_expires_at > now()
      AND i.id = a.worker_incarnation_id AND i.pool_id = CAST(%(pool_id)s AS uuid)
    RETURNING a.run_id, a.worker_incarnation_id
), seen AS (
    UPDATE worker_incarnations w SET last_seen_at = now()
    FROM attempt WHERE w.id = attempt.worker_incarnation_id
)
SELECT r.cancel_requested_at IS NOT NULL AS cancel
FROM attempt JOIN runs r ON r.id = attempt.run_id

-- complete_attempt --
-- A live lease's attempt -> its terminal status, with the completion kept for replays;
-- from_status is the status before (claimed, starting or running), read from the row locked
-- by the subquery (RETURNING a.status would be the new one)
UPDATE attempts a
SET status = %(status)s, exit_code = %(exit_code)s, signal = %(signal)s, reason = %(reason)s,
    completion = CAST(%(completion)s AS jsonb), finished_at = now(),
    version = a.version + 1, updated_at = now()
FROM worker_incarnations i,
     (SELECT id, status FROM attempts WHERE id = CAST(%(attempt_id)s AS uuid) FOR UPDATE) old
WHERE a.id = old.id AND a.lease_token = CAST(%(lease_token)s AS uuid)
  AND a.lease_version = %(lease_version)s
  AND a.status IN ('claimed', 'starting', 'running') AND a.lease_expires_at > now()
  AND i.id = a.worker_incarnation_id AND i.pool_id = CAST(%(pool_id)s AS uuid)
RETURNING old.status AS from_status

-- insert_log_artifact --
-- The facts control read from its own HEAD of the uploaded log, and the capped object's
-- layout the worker reported (NULL: the object is the raw output byte for byte)
INSERT INTO run_attempt_log_artifacts (id, attempt_id, project_id, run_id, bucket, object_key,
                                       version_id, size_bytes, sha256, content_type, metadata,
                                       etag, layout)
VALUES (%(id)s, CAST(%(attempt_id)s AS uuid), CAST(%(project_id)s AS uuid),
        CAST(%(run_id)s AS uuid), %(bucket)s, %(object_key)s,
        %(version_id)s, %(size_bytes)s, %(sha256)s, %(content_type)s,
        CAST(%(metadata)s AS jsonb), %(etag)s, CAST(%(layout)s AS jsonb))

-- run_fate --
-- Before a completion or a recovery decides between retry and the end: lock the task row
-- (shared: a removal waits, and the scheduler's order task -> run holds) and the run, and
-- read what decides, fresh (a cancel or a removal committed since the lease was read counts)
SELECT r.cancel_requested_at IS NOT NULL AS cancel, t.deleted_at IS NOT NULL AS task_deleted
FROM tasks t JOIN runs r ON r.task_id = t.id
WHERE r.id = CAST(%(run_id)s AS uuid)
FOR SHARE OF t FOR UPDATE OF r

-- finish_run --
-- The run takes its last attempt's terminal status
UPDATE runs r
SET status = %(status)s, finished_at = now(), exit_code = %(exit_code)s,
    version = r.version + 1, updated_at = now()
FROM (SELECT id, status FROM runs WHERE id = CAST(%(run_id)s AS uuid) FOR UPDATE) old
WHERE r.id = old.id AND old.status IN ('dispatching', 'running')
RETURNING r.status AS to_status, old.status AS from_status

-- requeue_run --
-- Back to queued for the next attempt, not before now() + %(delay_s)s (database time)
UPDATE runs r
SET status = 'queued', not_before = now() + make_interval(secs => %(delay_s)s),
    version = r.version + 1, updated_at = now()
FROM (SELECT id, status FROM runs WHERE id = CAST(%(run_id)s AS uuid) FOR UPDATE) old
WHERE r.id = old.id AND old.status IN ('dispatching', 'running')
RETURNING r.status AS to_status, old.status AS from_status

-- insert_event --
-- One history row for one transition
INSERT INTO events (id, run_id, attempt_id, kind, from_status, to_status, detail)
VALUES (CAST(%(id)s AS uuid), CAST(%(run_id)s AS uuid), CAST(%(attempt_id)s AS uuid), %(kind)s, %(from_status)s, %(to_status)s,
        CAST(%(detail)s AS jsonb))

-- expired_leases --
-- At most %(limit)s attempts whose lease expired by the database clock, oldest first
SELECT a.id::text AS attempt_id, a.run_id::text AS run_id, a.lease_version, a.number,
       a.status, a.started_at IS NOT NULL AS started, r.cancel_requested_at IS NOT NULL
       AS cancel, t.max_attempts, t.retry_backoff_ms, t.retry_backoff_cap_ms
FROM attempts a
JOIN runs r ON r.id = a.run_id
JOIN tasks t ON t.id = r.task_id
WHERE a.executor = 'remote_worker' AND a.status IN ('claimed', 'starting', 'running')
  AND a.lease_expires_at <= now()
ORDER BY a.lease_expires_at
LIMIT %(limit)s

-- lose_attempt --
-- Compare-and-set on the lease version: a renewal or completion that got there first wins
UPDATE attempts
SET status = 'lost', reason = %(reason)s, finished_at = now(), version = version + 1,
    updated_at = now()
WHERE id = CAST(%(attempt_id)s AS uuid) AND lease_version = %(lease_version)s
  AND status IN ('claimed', 'starting', 'running') AND lease_expires_at <= now()
RETURNING status

-- notify_claimable --
-- A run became claimable (requeued for a retry, or an older run of a task ended, which may
-- free its `replace` successor): wake the claims waiting on every replica at commit
-- (docs/protocols.md §4.2 "Claims that wait"; the channel carries no payload)
SELECT pg_notify('ql3_claimable', '')

-- next_due_in --
-- Seconds until the earliest queued run that is not yet due becomes due (NULL: none); a
-- waiting claim sleeps no longer than this (runs_queued_idx)
SELECT extract(epoch FROM min(not_before) - now()) AS due_in_s
FROM runs
WHERE status = 'queued' AND owner = 'runtime' AND not_before > now()
