-- 0003-retention: bounded disk (issue 3 item 6; DESIGN.md §3.8).
-- A retired attempt log leaves a durable tombstone, written BEFORE the file is unlinked and
-- marked done (done_at_ms) after, so `ql3 local logs` can say "gone (retired at ...)" and a
-- crash between the steps is finished by the next retention tick (no directory scans: the
-- path is the attempt's). Times are integer Unix milliseconds.

CREATE TABLE local_log_tombstones (
    attempt_id     TEXT PRIMARY KEY REFERENCES attempts (id),
    run_id         TEXT NOT NULL REFERENCES runs (id),
    retired_at_ms  INTEGER NOT NULL,
    log_path       TEXT NOT NULL,
    reason         TEXT NOT NULL CHECK (reason <> ''),
    done_at_ms     INTEGER
) STRICT;

-- Tombstones whose unlink is not yet confirmed (finished first by every retention tick).
CREATE INDEX local_log_tombstones_unfinished ON local_log_tombstones (retired_at_ms)
    WHERE done_at_ms IS NULL;
CREATE INDEX local_log_tombstones_run ON local_log_tombstones (run_id);

-- Log retirement candidates: finished attempts that have a log, oldest first.
CREATE INDEX attempts_log_retirement ON attempts (finished_at_ms, id)
    WHERE log_path IS NOT NULL AND finished_at_ms IS NOT NULL;

-- History retention candidates: finished runs, oldest first.
CREATE INDEX runs_history_retention ON runs (finished_at_ms, id)
    WHERE finished_at_ms IS NOT NULL;

-- The journal must never be orphaned: history pruning looks rows up by run.
CREATE INDEX local_completion_receipt_journal_run ON local_completion_receipt_journal (run_id);
