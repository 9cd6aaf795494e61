-- additive: true
-- Task names as people write them, and labels you can filter by (docs/protocols.md §4.5
-- "Names" and "Listing tasks"; shared/names.py).
--
-- name_key: the NFKC case-fold of the name, computed by the application
-- (qinglong.shared.names.name_key); two live tasks of a project with equal keys are the same
-- name (`Backup`/`backup`, full-width and ASCII digits). Rows written before this migration
-- hold ASCII names only, whose key is lower(name); should two live ones of a project differ
-- only in case, the older keeps the lowered key and each other one gets `name/id` (a '/' is
-- never in a name, so no later name can equal it): the index builds, nothing is renamed, and
-- each is still found by its exact spelling. NULL never appears after this migration (the
-- application always writes the key), but the column stays nullable: an additive migration
-- must not break a replica of the previous version that inserts without it.
ALTER TABLE tasks ADD COLUMN name_key text;

UPDATE tasks AS t SET name_key = lower(t.name)
WHERE t.deleted_at IS NOT NULL OR NOT EXISTS (
    SELECT 1 FROM tasks AS older
    WHERE older.project_id = t.project_id AND older.deleted_at IS NULL
      AND lower(older.name) = lower(t.name)
      AND (older.created_at, older.id) < (t.created_at, t.id));
UPDATE tasks SET name_key = name || '/' || id::text WHERE name_key IS NULL;

CREATE UNIQUE INDEX tasks_live_name_key_idx ON tasks (project_id, name_key)
    WHERE deleted_at IS NULL;

-- `GET /v1/tasks?label=k=v`: containment (labels @> '{"k": "v"}') through a GIN index.
CREATE INDEX tasks_labels_gin_idx ON tasks USING gin (labels jsonb_path_ops);
