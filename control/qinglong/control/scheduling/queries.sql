-- Cluster scheduling (DESIGN.md §4.2): run creation, the next-fire index, the occurrence
-- ledger. Times come from now() only (the database's clock).

-- lock_task --
-- Lock one task row (every run creation of a task serialises here) and read what it needs
SELECT id, project_id, deleted_at
FROM tasks
WHERE id = %(task_id)s
FOR UPDATE

-- insert_run --
-- Take the task's next number and insert a queued runtime run with its 'created' event; no
-- row (and no number taken) when the slot already has a run. Runs after lock_task, so this
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
SELECT id, project_id, task_id, number, trigger, scheduled_for, not_before, created_at
FROM run
