-- 0002-global-variables: user-wide variables every task receives (DESIGN.md §3.3), for example
-- the Envs of a Qinglong 2.x import (`ql3 local import-qinglong`). Values are secrets: no
-- view, log line or error message ever shows them; `ql3 local vars list` prints names only.

CREATE TABLE global_variables (
    name           TEXT PRIMARY KEY
                   CHECK (name GLOB '[A-Za-z_]*' AND name NOT GLOB '*[^A-Za-z0-9_]*'),
    value          TEXT NOT NULL,
    source         TEXT NOT NULL,
    updated_at_ms  INTEGER NOT NULL
) STRICT;
