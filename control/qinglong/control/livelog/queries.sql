-- Live log chunks (docs/protocols.md §4.9). Offsets are raw output bytes. The append holds
-- the attempt row's lock taken under the same lease predicate as a heartbeat, so it
-- serializes with recovery (lose_attempt waits for it, then finds a renewed or settled row).

-- lock_log_lease --
-- A live lease of the caller's pool: lock the attempt row, read its stored end and window
SELECT a.log_end, a.log_window_bytes
FROM attempts a
JOIN worker_incarnations i ON i.id = a.worker_incarnation_id
WHERE a.id = CAST(%(attempt_id)s AS uuid) AND a.lease_token = CAST(%(lease_token)s AS uuid)
  AND a.lease_version = %(lease_version)s
  AND a.status IN ('claimed', 'starting', 'running') AND a.lease_expires_at > now()
  AND i.pool_id = CAST(%(pool_id)s AS uuid)
FOR NO KEY UPDATE OF a

-- insert_chunk --
-- One data or gap row; rows of an attempt never overlap (the caller checked the end)
INSERT INTO attempt_log_chunks (attempt_id, start_offset, end_offset, gap, data)
VALUES (CAST(%(attempt_id)s AS uuid), %(start)s, %(end)s, %(gap)s, %(data)s)

-- set_log_end --
-- The new stored end and window size, under the lock taken by lock_log_lease
UPDATE attempts
SET log_end = %(end)s, log_window_bytes = %(window)s, log_rows = true
WHERE id = CAST(%(attempt_id)s AS uuid)

-- window_tail_rows --
-- The rows after the head, oldest first (candidates to drop when the window is full)
SELECT start_offset, end_offset, gap FROM attempt_log_chunks
WHERE attempt_id = CAST(%(attempt_id)s AS uuid) AND start_offset >= %(head)s
ORDER BY start_offset
LIMIT %(limit)s

-- drop_range --
-- Delete the rows starting in [start, stop)
DELETE FROM attempt_log_chunks
WHERE attempt_id = CAST(%(attempt_id)s AS uuid) AND start_offset >= %(start)s
  AND start_offset < %(stop)s

-- notify --
-- Wake the followers of every replica: payload "<attempt id> <end>", delivered on commit
SELECT pg_notify('ql3_log', %(payload)s)

-- read_state --
-- What a read needs about an attempt: status, stored end, rows, artifact and its layout,
-- retirement markers, the facts of the final event, and whether it completed without output
SELECT a.status, a.log_end, a.log_rows, a.log_rows_retired_at, a.exit_code, a.signal,
       a.reason, a.started_at, a.finished_at,
       coalesce((a.completion ->> 'no_output')::boolean, false) AS no_output,
       extract(epoch FROM (coalesce(a.finished_at, now()) - coalesce(a.started_at, a.claimed_at)))
           AS duration_s,
       art.id AS artifact_id, art.bucket, art.object_key, art.version_id, art.size_bytes,
       art.sha256, art.content_type, art.layout, art.project_id::text AS project_id,
       art.run_id::text AS run_id, tb.retired_at AS tb_retired_at, tb.outcome AS tb_outcome
FROM attempts a
LEFT JOIN run_attempt_log_artifacts art ON art.attempt_id = a.id
LEFT JOIN run_attempt_log_artifact_tombstones tb ON tb.attempt_id = a.id
WHERE a.id = CAST(%(attempt_id)s AS uuid)

-- read_rows --
-- The rows overlapping [from, from + limit bytes): the row holding ``from`` and what follows
SELECT start_offset, end_offset, gap,
       CASE WHEN gap THEN NULL ELSE data END AS data
FROM attempt_log_chunks
WHERE attempt_id = CAST(%(attempt_id)s AS uuid) AND end_offset > %(from)s
  AND start_offset < %(to)s
ORDER BY start_offset

-- delete_chunks --
-- The completion recorded a verified artifact: the live rows go (same transaction)
WITH gone AS (
    DELETE FROM attempt_log_chunks WHERE attempt_id = CAST(%(attempt_id)s AS uuid)
)
UPDATE attempts SET log_rows = false, log_window_bytes = 0
WHERE id = CAST(%(attempt_id)s AS uuid)

-- expired_partial_logs --
-- Ended attempts still holding chunk rows whose task's log retention has passed since
-- they ended (partial logs: lost, not_started, a log that could not be stored)
SELECT a.id::text AS attempt_id
FROM attempts a
JOIN runs r ON r.id = a.run_id
JOIN tasks t ON t.id = r.task_id
WHERE a.log_rows AND a.finished_at IS NOT NULL
  AND a.status NOT IN ('claimed', 'starting', 'running')
  AND a.finished_at + make_interval(secs => t.log_retention_s) <= now()
ORDER BY a.finished_at
LIMIT %(limit)s
FOR NO KEY UPDATE OF a SKIP LOCKED

-- retire_partial_log --
-- Drop one partial log's rows and leave the marker that makes a read answer 410
WITH gone AS (
    DELETE FROM attempt_log_chunks WHERE attempt_id = CAST(%(attempt_id)s AS uuid)
)
UPDATE attempts SET log_rows = false, log_window_bytes = 0, log_rows_retired_at = now()
WHERE id = CAST(%(attempt_id)s AS uuid) AND log_rows
