-- 0008-variable-values: global variables as Qinglong users keep them (环境变量,
-- docs/protocols.md §3.3). A name holds one or more values in order (multi-account
-- JD_COOKIE), each with a remark and an enabled flag; a task receives the enabled ones joined
-- with `&` in their order, and `global_variables.value` keeps that joined value (what
-- `--secret-env NAME=@VAR` resolves). Disabling keeps a value. `secret` = 0 lets
-- `vars show NAME --reveal` print the values; secret ones (the default, and every variable
-- stored before) are never shown.

ALTER TABLE global_variables ADD COLUMN secret INTEGER NOT NULL DEFAULT 1
    CHECK (secret IN (0, 1));

CREATE TABLE global_variable_values (
    name           TEXT NOT NULL REFERENCES global_variables (name) ON DELETE CASCADE,
    position       INTEGER NOT NULL CHECK (position >= 1),
    value          TEXT NOT NULL,
    remark         TEXT NOT NULL DEFAULT '',
    enabled        INTEGER NOT NULL DEFAULT 1 CHECK (enabled IN (0, 1)),
    updated_at_ms  INTEGER NOT NULL,
    PRIMARY KEY (name, position)
) STRICT;

INSERT INTO global_variable_values (name, position, value, updated_at_ms)
    SELECT name, 1, value, updated_at_ms FROM global_variables;
