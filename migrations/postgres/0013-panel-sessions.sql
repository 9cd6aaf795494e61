-- additive: true
-- Sessions of the cluster's web panel (docs/panel.md "Cluster"; DESIGN §4.6). A browser
-- signs in with an API token (viewer, operator or admin; never a worker token) and keeps a
-- server-side session: the cookie carries a random id, the table only its SHA-256, so a dump
-- of this table signs nobody in. A session dies with its token: every request joins the
-- token row (revoked: the session is refused at once) and the FK cascades when a token row
-- is ever deleted. Idle and absolute expiry are absolute times by the database clock; the
-- replicas' sweep deletes expired rows.
CREATE TABLE panel_sessions (
    id_sha256     text PRIMARY KEY CHECK (id_sha256 ~ '^[0-9a-f]{64}$'),
    token_id      uuid NOT NULL REFERENCES api_tokens (id) ON DELETE CASCADE,
    csrf          text NOT NULL CHECK (char_length(csrf) BETWEEN 32 AND 128),
    created_at    timestamptz NOT NULL DEFAULT now(),
    last_seen_at  timestamptz NOT NULL DEFAULT now(),
    idle_expires_at      timestamptz NOT NULL,
    absolute_expires_at  timestamptz NOT NULL,
    CHECK (idle_expires_at <= absolute_expires_at)
);
CREATE INDEX panel_sessions_token_idx ON panel_sessions (token_id);
CREATE INDEX panel_sessions_expiry_idx ON panel_sessions (idle_expires_at);

-- Failed sign-ins per client address, shared by every replica: each failure doubles the
-- wait before the next attempt is heard (1 s, 2 s, 4 s … capped); a success or a quiet
-- hour clears the row (the sweep deletes rows whose wait has long passed).
CREATE TABLE panel_signin_failures (
    client        text PRIMARY KEY CHECK (char_length(client) BETWEEN 1 AND 64),
    failures      integer NOT NULL CHECK (failures >= 1),
    last_failed_at  timestamptz NOT NULL DEFAULT now(),
    blocked_until   timestamptz NOT NULL
);
