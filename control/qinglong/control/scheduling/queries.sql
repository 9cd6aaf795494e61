-- Cluster scheduling (docs/protocols.md §4.2): run creation, the next-fire index, the occurrence
-- ledger. Times come from now() only (the database's clock).

-- lock_task --
-- Lock one task row (every run creation of a task serialises here) and read what it needs
SELECT id, project_id, deleted_at, concurrency_policy
FROM tasks
WHERE id = %(task_id)s
FOR UPDATE

-- insert_run --
-- Take the task's next number and insert a queued runtime run with its 'created' event; no
-- row (and no number taken) when the slot already has a run. A NOTIFY on ql3_claimable,
-- delivered at commit, wakes the claims waiting on every replica (docs/protocols.md §4.2). Runs after lock_task, so this
-- statement's snapshot sees every run committed by the previous holder of the lock.
WITH bump AS (
    UPDATE tasks SET run_counter = run_counter + 1
    WHERE id = %(task_id)s
      AND NOT EXISTS (SELECT 1 FROM runs
                      WHERE task_id = %(task_id)s
                        AND scheduled_for = CAST(%(scheduled_for)s AS timestamptz))
    RETURNING project_id, run_counter
), run AS (
    INSERT INTO runs (id, project_id, task_id, owner, status, number, trigger, scheduled_for,
                      not_before)
    SELECT CAST(%(run_id)s AS uuid), bump.project_id, CAST(%(task_id)s AS uuid), 'runtime',
           'queued', bump.run_counter, CAST(%(trigger)s AS text),
           CAST(%(scheduled_for)s AS timestamptz), now()
    FROM bump
    ON CONFLICT (task_id, scheduled_for) WHERE scheduled_for IS NOT NULL DO NOTHING
    RETURNING id, project_id, task_id, number, trigger, scheduled_for, not_before, created_at
), created AS (
    INSERT INTO events (id, run_id, kind, from_status, to_status, detail)
    SELECT CAST(%(event_id)s AS uuid), run.id, 'created', NULL, 'queued',
           jsonb_build_object('trigger', run.trigger)
    FROM run
)
SELECT id, project_id, task_id, number, trigger, scheduled_for, not_before, created_at,
       (SELECT 1 FROM (SELECT pg_notify('ql3_claimable', '')) n) AS woke
FROM run

-- insert_allowed_run --
-- Run now of an `allow` task, as its transaction's last statement: the UPDATE takes the task
-- row's lock and the next number (re-checked on the newest row version when it had to wait,
-- so numbers stay gapless and a removal or a policy edit committed meanwhile is seen), then
-- the run and its 'created' event, and the NOTIFY that wakes waiting claims. No row when the task was removed or is no longer
-- `allow`: the caller decides again under the lock (lock_task).
WITH bump AS (
    UPDATE tasks SET run_counter = run_counter + 1
    WHERE id = %(task_id)s AND deleted_at IS NULL AND concurrency_policy = 'allow'
    RETURNING project_id, run_counter
), run AS (
    INSERT INTO runs (id, project_id, task_id, owner, status, number, trigger, not_before)
    SELECT CAST(%(run_id)s AS uuid), bump.project_id, CAST(%(task_id)s AS uuid), 'runtime',
           'queued', bump.run_counter, 'manual', now()
    FROM bump
    RETURNING id, project_id, task_id, number, trigger, scheduled_for, not_before, created_at
), created AS (
    INSERT INTO events (id, run_id, kind, from_status, to_status, detail)
    SELECT CAST(%(event_id)s AS uuid), run.id, 'created', NULL, 'queued',
           jsonb_build_object('trigger', run.trigger)
    FROM run
)
SELECT id, project_id, task_id, number, trigger, scheduled_for, not_before, created_at,
       (SELECT 1 FROM (SELECT pg_notify('ql3_claimable', '')) n) AS woke
FROM run

-- claim_request_key --
-- Record an Idempotency-Key of run now for the run about to be made; a row already there
-- and younger than 24 hours wins (no row returned: the caller answers that row's run). A
-- concurrent first use of the key waits here for the other transaction's end.
INSERT INTO run_request_keys (task_id, key, run_id)
VALUES (%(task_id)s, %(key)s, %(run_id)s)
ON CONFLICT (task_id, key) DO UPDATE SET run_id = EXCLUDED.run_id, created_at = now()
    WHERE run_request_keys.created_at < now() - interval '24 hours'
RETURNING run_id

-- requested_run --
-- The run an earlier request with this key made
SELECT r.id, r.number
FROM run_request_keys k JOIN runs r ON r.id = k.run_id
WHERE k.task_id = %(task_id)s AND k.key = %(key)s

-- prune_request_keys --
-- Delete at most %(limit)s keys older than 24 hours, oldest first (run_request_keys_created_idx);
-- the picked rows are fixed first (a plain IN (subquery LIMIT n) may lock more than n)
WITH picked AS MATERIALIZED (
    SELECT task_id, key FROM run_request_keys
    WHERE created_at < now() - interval '24 hours'
    ORDER BY created_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
DELETE FROM run_request_keys k USING picked
WHERE k.task_id = picked.task_id AND k.key = picked.key

-- due_tasks_plan --
-- Pin due_tasks' plan (docs/protocols.md §4.3): without statistics the planner guesses a
-- handful of due tasks and would read and sort every due row; with sorts priced out, the
-- only plan left walks tasks_next_fire_idx in order and stops at the page size
SELECT set_config('enable_sort', 'off', true)

-- due_tasks_unpin --
-- The rest of the tick's transaction plans as usual
SELECT set_config(name, reset_val, true) FROM pg_settings WHERE name = 'enable_sort'

-- due_tasks --
-- What is due by the database clock, oldest first, from the next-fire index only; rows locked
-- by another replica are skipped (replicas split the work)
SELECT id, schedule, timezone, concurrency_policy, catchup_grace_s, next_fire_at,
       schedule_version, now() AS db_now
FROM tasks
WHERE next_fire_at <= now() AND next_fire_at IS NOT NULL AND enabled AND deleted_at IS NULL
ORDER BY next_fire_at
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED

-- advance --
-- Compare-and-set the task's next fire time on the schedule_version read; bumps the version
UPDATE tasks SET next_fire_at = %(next_fire_at)s, schedule_version = schedule_version + 1
WHERE id = %(task_id)s AND schedule_version = %(schedule_version)s

-- lock_schedule --
-- Lock one task row and read what a reschedule needs
SELECT id, schedule, timezone, enabled, deleted_at, schedule_version, now() AS db_now
FROM tasks
WHERE id = %(task_id)s
FOR UPDATE

-- active_runs --
-- The task's runs that are queued, dispatching or running (runs_active_by_task_idx)
SELECT id, status, cancel_requested_at, number
FROM runs
WHERE task_id = %(task_id)s AND status IN ('queued', 'dispatching', 'running')
ORDER BY number

-- request_cancel --
-- Policy replace: ask one active run to stop (once), with its run event
WITH marked AS (
    UPDATE runs SET cancel_requested_at = now(), version = version + 1, updated_at = now()
    WHERE id = %(run_id)s AND cancel_requested_at IS NULL
      AND status IN ('queued', 'dispatching', 'running')
    RETURNING id, status
)
INSERT INTO events (id, run_id, kind, from_status, to_status, detail)
SELECT CAST(%(event_id)s AS uuid), marked.id, 'cancel_requested', marked.status, marked.status,
       jsonb_build_object('reason', 'replaced', 'by_run', CAST(%(by_run)s AS text))
FROM marked

-- cancel_queued --
-- Policy replace or a removed task: a run still queued never starts; it ends cancelled now
-- with its run event (a dispatching or running one gets request_cancel instead)
WITH gone AS (
    UPDATE runs SET status = 'cancelled', finished_at = now(),
        cancel_requested_at = coalesce(cancel_requested_at, now()),
        version = version + 1, updated_at = now()
    WHERE id = %(run_id)s AND status = 'queued'
    RETURNING id
)
INSERT INTO events (id, run_id, kind, from_status, to_status, detail)
SELECT CAST(%(event_id)s AS uuid), gone.id, 'cancelled', 'queued', 'cancelled',
       jsonb_build_object('reason', CAST(%(reason)s AS text), 'by_run', CAST(%(by_run)s AS text))
FROM gone
RETURNING run_id

-- latest_occurrence --
-- The task's newest ledger row (occurrences_task_slot_idx): the candidate for a merge
SELECT id, outcome, last_slot
FROM occurrences
WHERE task_id = %(task_id)s
ORDER BY last_slot DESC
LIMIT 1

-- extend_occurrence --
-- Merge consecutive slots with the same skip outcome into the row that precedes them
UPDATE occurrences SET last_slot = %(last_slot)s, slot_count = slot_count + %(slot_count)s
WHERE id = %(id)s

-- insert_occurrence --
-- One ledger row: a created run (one slot) or a compact range of skipped slots
INSERT INTO occurrences (id, task_id, outcome, first_slot, last_slot, slot_count, run_id)
VALUES (%(id)s, %(task_id)s, %(outcome)s, %(first_slot)s, %(last_slot)s, %(slot_count)s,
        %(run_id)s)

-- prune_occurrences_plan --
-- Pin the prune's plan in its transaction: without statistics the only plan left walks
-- occurrences_last_slot_idx (0010) in order and deletes each picked row by key
SELECT set_config('enable_sort', 'off', true), set_config('enable_hashjoin', 'off', true),
       set_config('enable_mergejoin', 'off', true), set_config('enable_seqscan', 'off', true),
       set_config('enable_bitmapscan', 'off', true), set_config('jit', 'off', true)

-- prune_occurrences --
-- Delete at most %(limit)s ledger rows whose last slot is before %(older_than)s, oldest first.
-- The picked rows are fixed first (a MATERIALIZED CTE: a plain IN (subquery LIMIT n) may run
-- the subquery again per row under a nested loop and delete more than n)
WITH picked AS MATERIALIZED (
    SELECT id FROM occurrences
    WHERE last_slot < %(older_than)s
    ORDER BY last_slot
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
DELETE FROM occurrences o
USING picked p
WHERE o.id = p.id
