-- additive: true
-- Pinned tasks and saved views of the web panel's Tasks page (docs/panel.md "Pinned tasks
-- and saved views"). A pinned task sorts first on the page for everyone: the flag is part
-- of the task row, not of its definition (no version bump, no event). A saved view is a
-- user's named search and sort, keyed by the signing-in token's name (so a token rotated
-- under the same name keeps its views); the query is the search box's text.
ALTER TABLE tasks ADD COLUMN pinned boolean NOT NULL DEFAULT false;

CREATE TABLE panel_views (
    token_name  text NOT NULL CHECK (char_length(token_name) BETWEEN 1 AND 100),
    name        text NOT NULL CHECK (char_length(name) BETWEEN 1 AND 100),
    query       text NOT NULL CHECK (char_length(query) <= 200),
    sort        text NOT NULL CHECK (sort IN ('name', '-name', 'next_fire')),
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (token_name, name)
);
