-- 0006-task-secret-env: a task's secret environment variables (issue 12 item 7, DESIGN.md
-- §3.3). Each row holds either a literal value or the name of a global variable resolved at
-- every start. Values are secrets: no view, event, log line or error message shows them; a
-- view shows `********` for a value and `@NAME` for a reference.

CREATE TABLE task_secret_env (
    task_id        TEXT NOT NULL REFERENCES tasks (id),
    name           TEXT NOT NULL
                   CHECK (name GLOB '[A-Za-z_]*' AND name NOT GLOB '*[^A-Za-z0-9_]*'),
    value          TEXT,
    variable       TEXT
                   CHECK (variable IS NULL OR (variable GLOB '[A-Za-z_]*'
                          AND variable NOT GLOB '*[^A-Za-z0-9_]*')),
    updated_at_ms  INTEGER NOT NULL,
    PRIMARY KEY (task_id, name),
    CHECK ((value IS NULL) <> (variable IS NULL))
) STRICT;
