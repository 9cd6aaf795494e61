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

-- Push channels of the cluster (docs/protocols.md §4.5 "Push channels"): Apprise URLs an
-- admin configures (each a secret as a whole: answers show `target`, scheme and host), and
-- one notification per (run, channel) for a run that ended in one of the channel's statuses.
-- Replicas claim pending notifications (FOR UPDATE SKIP LOCKED, a claim that expires), send
-- them and record the outcome: at least once, each with its stable id.
CREATE TABLE notify_channels (
    id          uuid PRIMARY KEY,
    url         text NOT NULL CHECK (url ~ '^[A-Za-z][A-Za-z0-9+.-]{0,31}://\S+$'),
    target      text NOT NULL,
    notify_on   text[] NOT NULL DEFAULT '{failed,timed_out,lost}',
    created_by  text,
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE notifications (
    id             uuid PRIMARY KEY,
    run_id         uuid NOT NULL REFERENCES runs (id),
    channel_id     uuid NOT NULL REFERENCES notify_channels (id) ON DELETE CASCADE,
    status         text NOT NULL DEFAULT 'pending'
                   CHECK (status IN ('pending', 'sent', 'failed')),
    tries          integer NOT NULL DEFAULT 0,
    claimed_until  timestamptz,
    last_error     text,
    created_at     timestamptz NOT NULL DEFAULT now(),
    finished_at    timestamptz,
    UNIQUE (run_id, channel_id)
);
CREATE INDEX notifications_pending_idx ON notifications (created_at) WHERE status = 'pending';
