-- additive: true
-- Live cluster logs (docs/protocols.md §4.9). While an attempt runs, the worker sends its raw
-- output by byte offset (POST /v1/worker/log-chunk); control appends it here under the
-- attempt's lease compare-and-set. Offsets count the task's raw output bytes, before any cap.
--
-- A row is either data (``data`` holds raw bytes [start_offset, end_offset)) or a gap
-- (``gap``: the bytes [start_offset, end_offset) cannot be served live: not streamed, or
-- dropped from the window; the byte count is end_offset - start_offset). Rows of one attempt
-- tile [0, attempts.log_end) without overlap. The window keeps at most 8 MiB of data per
-- attempt: the head (rows starting in the first MiB), then the latest bytes; the dropped
-- middle becomes one gap row.
--
-- The rows go when the completion records a verified artifact (same transaction). Any other
-- terminal attempt keeps them as its partial log until the task's log retention has passed
-- since it ended; a database-only sweep then deletes them and sets
-- attempts.log_rows_retired_at, so a read answers 410 log_retired.
CREATE TABLE attempt_log_chunks (
    attempt_id    uuid NOT NULL REFERENCES attempts (id),
    start_offset  bigint NOT NULL CHECK (start_offset >= 0),
    end_offset    bigint NOT NULL,
    gap           boolean NOT NULL DEFAULT false,
    data          bytea NOT NULL DEFAULT ''::bytea,
    created_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (attempt_id, start_offset),
    CHECK (end_offset > start_offset OR (end_offset = start_offset AND NOT gap)),
    CHECK (gap AND length(data) = 0 OR NOT gap AND length(data) = end_offset - start_offset)
);
-- Rows are short-lived (deleted at completion): vacuum them eagerly.
ALTER TABLE attempt_log_chunks SET (autovacuum_vacuum_scale_factor = 0.02,
                                    autovacuum_vacuum_threshold = 1000);

-- The stored end (next raw offset control wants) and the bytes of data held in the window,
-- both written only under the lease compare-and-set of the append; ``log_rows`` is true while
-- the attempt holds chunk rows (set by the first append, cleared when they are deleted).
ALTER TABLE attempts
    ADD COLUMN log_end bigint NOT NULL DEFAULT 0 CHECK (log_end >= 0),
    ADD COLUMN log_window_bytes bigint NOT NULL DEFAULT 0 CHECK (log_window_bytes >= 0),
    ADD COLUMN log_rows boolean NOT NULL DEFAULT false,
    ADD COLUMN log_rows_retired_at timestamptz;

-- The partial-log sweep: ended attempts that still hold chunk rows (no verified artifact).
CREATE INDEX attempts_partial_log_idx ON attempts (finished_at)
    WHERE log_rows AND finished_at IS NOT NULL;

-- How a capped final object maps raw offsets (CompletionReport.layout): the object holds raw
-- [0, head_bytes), one marker line, then raw [tail_offset, raw_bytes). NULL: the object is the
-- raw output byte for byte.
ALTER TABLE run_attempt_log_artifacts
    ADD COLUMN layout jsonb CHECK (layout IS NULL OR jsonb_typeof(layout) = 'object');
