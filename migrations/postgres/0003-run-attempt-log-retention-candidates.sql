-- additive: true
-- One definition of a Run Attempt log retention candidate (ADR-0379 §2; DESIGN.md §4.3), read
-- by both enrollment paths (enroll_run in the terminal transition, the bounded enroll_sweep):
-- a terminal, non-lost remote worker attempt of a terminal runtime-owned run, with its worker
-- log recorded and no tombstone yet. eligible_at = the later finished_at of run and attempt
-- plus the task's log retention.
CREATE VIEW run_attempt_log_retention_candidates AS
SELECT a.id AS attempt_id, r.project_id, r.id AS run_id, la.id AS artifact_id, la.bucket,
       la.object_key, la.version_id, la.size_bytes, la.sha256, la.content_type,
       greatest(r.finished_at, a.finished_at)
           + make_interval(secs => t.log_retention_s) AS eligible_at,
       a.finished_at AS attempt_finished_at
FROM attempts a
JOIN runs r ON r.id = a.run_id
JOIN tasks t ON t.id = r.task_id
JOIN run_attempt_log_artifacts la ON la.attempt_id = a.id
WHERE a.executor = 'remote_worker'
  AND a.status IN ('succeeded', 'failed', 'cancelled', 'timed_out')
  AND a.finished_at IS NOT NULL
  AND r.owner = 'runtime'
  AND r.status IN ('succeeded', 'failed', 'cancelled', 'timed_out')
  AND r.finished_at IS NOT NULL
  AND la.id = 'wlog-' || a.id::text AND la.run_id = r.id AND la.project_id = r.project_id
  AND NOT EXISTS (SELECT 1 FROM run_attempt_log_artifact_tombstones tb
                  WHERE tb.attempt_id = a.id);
