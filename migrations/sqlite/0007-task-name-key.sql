-- 0007-task-name-key: task names as people write them (docs/protocols.md §4.5 "Names",
-- shared/names.py). A name may be any script's letters and digits; two names equal under
-- NFKC case-folding (`Backup`/`backup`, full-width/ASCII digits) are the same name. The key is
-- computed by the application (`qinglong.shared.names.name_key`) and kept beside the name;
-- the unique index on live tasks' keys refuses the second one.
--
-- Rows written before this migration hold ASCII names only, whose key is lower(name). Should
-- two live ones already differ only in case, the older keeps the lowered key and each other
-- one gets `name/id` (a '/' is never in a name, so no later name can equal it): the index
-- can be built, nothing is renamed, and each is still found by its exact spelling.

ALTER TABLE tasks ADD COLUMN name_key TEXT;

UPDATE tasks SET name_key = lower(name)
WHERE deleted_at_ms IS NOT NULL OR NOT EXISTS (
    SELECT 1 FROM tasks AS older
    WHERE older.deleted_at_ms IS NULL AND lower(older.name) = lower(tasks.name)
      AND (older.created_at_ms, older.id) < (tasks.created_at_ms, tasks.id));

UPDATE tasks SET name_key = name || '/' || id WHERE name_key IS NULL;

CREATE UNIQUE INDEX tasks_live_name_key ON tasks (name_key) WHERE deleted_at_ms IS NULL;
