-- additive: true
-- Global variables as Qinglong users keep them (环境变量; docs/protocols.md §4.5 "Global
-- variables"). A variable has a name, a pool scope (NULL: every pool; else the pool names it
-- reaches) and a secret flag; its values are ordered, each with a remark and an enabled
-- flag. A claim answer carries the variables in the claiming pool's scope: for each, the
-- enabled values joined with '&' in position order; a task's own env overrides them. Values
-- are secrets: no API answer, event, log line or metric carries one (the viewer reads names,
-- remarks and flags only). One value is at most 128 KiB (execve's MAX_ARG_STRLEN).
CREATE TABLE global_variables (
    name        text PRIMARY KEY CHECK (name ~ '^[A-Za-z_][A-Za-z0-9_]{0,127}$'),
    pools       text[] CHECK (pools IS NULL OR cardinality(pools) >= 1),
    secret      boolean NOT NULL DEFAULT true,
    updated_by  text,                                   -- the writing token's name
    updated_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE global_variable_values (
    name        text NOT NULL REFERENCES global_variables (name) ON DELETE CASCADE,
    position    integer NOT NULL CHECK (position >= 1),
    value       text NOT NULL CHECK (octet_length(value) <= 131072),
    remark      text NOT NULL DEFAULT '' CHECK (char_length(remark) <= 200),
    enabled     boolean NOT NULL DEFAULT true,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (name, position)
);
