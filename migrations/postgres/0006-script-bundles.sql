-- additive: true
-- Script bundles (docs/protocols.md §4.7): a gzip tar pushed through control, stored in the
-- bucket under its SHA-256 (key bundles/sha256/<hex>) and recorded here with its checked
-- member list. Content-addressed and deployment-wide: the digest is the key. Rows are
-- immutable (no UPDATE grant); a push of the same bytes answers the existing row.
CREATE TABLE script_bundles (
    digest          text PRIMARY KEY CHECK (digest ~ '^[0-9a-f]{64}$'),
    object_key      text NOT NULL,
    size_bytes      bigint NOT NULL CHECK (size_bytes > 0),
    member_count    integer NOT NULL CHECK (member_count >= 1),
    unpacked_bytes  bigint NOT NULL CHECK (unpacked_bytes >= 0),
    -- [{"path": "...", "kind": "file"|"dir", "size_bytes": n, "mode": n}] in archive order
    members         jsonb NOT NULL CHECK (jsonb_typeof(members) = 'array'),
    created_by      text,                                   -- the pushing token's name
    created_at      timestamptz NOT NULL DEFAULT now()
);

-- A task names a recorded bundle (0005 added the column, unused until now). NOT VALID: rows
-- written before this migration are not re-checked (none name a bundle), new ones are. The
-- key is what makes "a bundle used by a task cannot be removed" hold under concurrency: a
-- removal first clears the references of removed tasks, then deletes the row, and the
-- foreign key refuses the delete while any live task (committed before or during it)
-- names the bundle. Attempts keep their own record of the digest.
ALTER TABLE tasks
    ADD CONSTRAINT tasks_bundle_digest_fkey FOREIGN KEY (bundle_digest)
        REFERENCES script_bundles (digest) NOT VALID;
-- "used by": tasks naming a bundle; also serves the foreign key's check on delete.
CREATE INDEX tasks_bundle_digest_idx ON tasks (bundle_digest) WHERE bundle_digest IS NOT NULL;

-- The bundle an attempt was claimed with (the task may be edited later): the presigned GET
-- is granted for exactly this digest, and the record outlives the bundle (no foreign key).
ALTER TABLE attempts
    ADD COLUMN bundle_digest text CHECK (bundle_digest IS NULL OR bundle_digest ~ '^[0-9a-f]{64}$');
CREATE INDEX attempts_live_bundle_idx ON attempts (bundle_digest)
    WHERE bundle_digest IS NOT NULL AND status IN ('claimed', 'starting', 'running');
