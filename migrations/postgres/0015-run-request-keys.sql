-- additive: true
-- "Run now" with an Idempotency-Key (docs/protocols.md §4.5): the first request with a key
-- records the run it made; a retry with the same key for the same task within 24 hours
-- answers that run instead of making another. A key older than 24 hours counts as unused
-- (the row is taken over in place) and the replicas prune such rows in bounded batches.
-- The run is inserted after this row, in the same transaction, as the transaction's last
-- statement (the run number is taken there): run_id therefore has no foreign key.
CREATE TABLE run_request_keys (
    task_id     uuid NOT NULL,
    key         text NOT NULL CHECK (key ~ '^[!-~]{1,255}$'),
    run_id      uuid NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (task_id, key)
);
-- The prune walks keys by age, oldest first.
CREATE INDEX run_request_keys_created_idx ON run_request_keys (created_at);
