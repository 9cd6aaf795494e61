-- 0005-run-numbers: each run's number within its task (issue 12 item 3), shown as `backup#42`
-- the way CI systems number builds, and accepted wherever a run id is.
--
-- number: 1, 2, 3, ... in creation order, assigned once when the run is created and never
--   changed. Numbers count per task *name*: a task removed and added again under the same name
--   continues after the highest number of its predecessors, so `backup#7` names one run for as
--   long as history keeps it. NULL only transiently inside this migration.
-- Existing runs are numbered here in run-id (UUIDv7, creation) order per task name.

ALTER TABLE runs ADD COLUMN number INTEGER CHECK (number IS NULL OR number >= 1);

UPDATE runs SET number = (
    SELECT numbered.n FROM (
        SELECT r.id AS id, row_number() OVER (PARTITION BY t.name ORDER BY r.id) AS n
        FROM runs r JOIN tasks t ON t.id = r.task_id
    ) AS numbered
    WHERE numbered.id = runs.id
);

-- One number per task; `TASK#N` and the next number (max + 1 per task of the name, read with
-- the min/max optimisation) are point lookups.
CREATE UNIQUE INDEX runs_task_number ON runs (task_id, number);

-- `TASK#N` and `TASK@last` find every task of a name, removed ones included (tasks_live_name
-- holds only live ones).
CREATE INDEX tasks_name ON tasks (name);

-- A run-id suffix (at least 6 hex digits; UUIDv7 ends in random bits, its prefix is a
-- timestamp) is looked up through its last 6 characters instead of scanning every run.
CREATE INDEX runs_id_suffix ON runs (substr(id, -6));
