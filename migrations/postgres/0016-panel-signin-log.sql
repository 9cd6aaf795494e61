-- additive: true
-- The cluster panel's sign-in log (docs/panel.md "Cluster", Settings): one row per sign-in
-- that was heard (a throttled address's attempts are not), success or not, with the client
-- address and, for a success, the token's id and name. A failure names no token: the text
-- typed is never stored. The replicas' panel sweep deletes rows older than 90 days.
CREATE TABLE panel_signins (
    id          uuid PRIMARY KEY,
    at          timestamptz NOT NULL DEFAULT now(),
    client      text NOT NULL CHECK (char_length(client) BETWEEN 1 AND 64),
    ok          boolean NOT NULL,
    token_id    uuid REFERENCES api_tokens (id) ON DELETE SET NULL,
    token_name  text CHECK (char_length(token_name) BETWEEN 1 AND 100),
    CHECK (ok = (token_name IS NOT NULL))
);
CREATE INDEX panel_signins_at_idx ON panel_signins (at);
