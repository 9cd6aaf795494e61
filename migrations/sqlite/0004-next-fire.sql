-- 0004-next-fire: each task's next fire time, stored and indexed (issue 10 items 1 and 3;
-- DESIGN.md §3.7), so a scheduler tick reads only what is due instead of evaluating every
-- schedule. Times are integer Unix milliseconds.
--
-- next_fire_at_ms: the first slot after the task's schedule cursor; NULL = no slot (@boot,
--   @once, an invalid schedule, a cron with no future slot, a disabled or removed task).
-- next_fire_pending: why next_fire_at_ms must be (re)computed by the scheduler, in bounded
--   batches: 'new' (created, imported, enabled, or present before this migration) or
--   'clock_step' (the wall clock stepped back past the task's cursor); NULL = up to date.
--   Every existing row starts 'new', so the first tick after the upgrade computes it from
--   the stored cursor (missed slots still follow the misfire grace).

-- schedule_replay_until_ms: after a backward step, the newest cursor the task had reached;
--   slots up to it are re-evaluated, and one that already has a run or a recorded skip is
--   passed over silently (no slot fires twice, no skip is recorded twice). NULL = none.

ALTER TABLE tasks ADD COLUMN next_fire_at_ms INTEGER;
ALTER TABLE tasks ADD COLUMN schedule_replay_until_ms INTEGER;
ALTER TABLE tasks ADD COLUMN next_fire_pending TEXT DEFAULT 'new'
    CHECK (next_fire_pending IS NULL OR next_fire_pending IN ('new', 'clock_step'));

-- The due page (next_fire_at_ms <= now) and the serve loop's wake-up (MIN): enabled live
-- cron tasks whose next fire time is up to date, in (next_fire_at_ms, id) order.
CREATE INDEX tasks_next_fire ON tasks (next_fire_at_ms, id)
    WHERE enabled = 1 AND deleted_at_ms IS NULL AND next_fire_pending IS NULL
      AND next_fire_at_ms IS NOT NULL;

-- The batches still to compute.
CREATE INDEX tasks_next_fire_pending ON tasks (id)
    WHERE enabled = 1 AND deleted_at_ms IS NULL AND next_fire_pending IS NOT NULL;

-- Slot admission (issue 10 item 4) reads one task's unfinished runs per due slot.
CREATE INDEX runs_task_unfinished ON runs (task_id, status)
    WHERE status IN ('queued', 'dispatching', 'running');

-- Slot outcomes without a run (skips, coalesced slots): re-evaluating a slot after a backward
-- clock step asks whether it was already recorded, reading only these events of the task.
CREATE INDEX events_slot_outcomes ON events (task_id, id)
    WHERE run_id IS NULL AND kind IN ('slot_skipped', 'slot_coalesced', 'slots_skipped');
