-- 0009-pinned-tasks-and-saved-views: the web panel's pinned tasks (first on the Tasks
-- page) and saved views (a named search and sort; docs/panel.md "Pinned tasks and saved
-- views"). The data directory belongs to one user, so views need no user column.

ALTER TABLE tasks ADD COLUMN pinned INTEGER NOT NULL DEFAULT 0 CHECK (pinned IN (0, 1));

CREATE TABLE saved_views (
    name           TEXT PRIMARY KEY CHECK (length(name) BETWEEN 1 AND 100),
    query          TEXT NOT NULL CHECK (length(query) <= 200),
    sort           TEXT NOT NULL CHECK (sort IN ('name', '-name', 'next_fire')),
    created_at_ms  INTEGER NOT NULL
) STRICT;
