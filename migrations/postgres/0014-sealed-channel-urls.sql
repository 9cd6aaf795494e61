-- additive: true
-- Push-channel URLs sealed at rest, as 0011/0012 do for secret variable values
-- (docs/operations.md "Secret values at rest"; control/qinglong/control/secrets/store.py).
-- An Apprise URL carries its bot token or device key, so the whole URL is the secret.
-- Expand step: a sealed column beside the plaintext `url`. A channel added while sealing is
-- on, or sealed later by `ql3 control secrets enable` or a replica's batch, keeps `url` = ''
-- and its sealed text in `sealed_url` ("v1.<key id>.<nonce>.<ciphertext>"); associated
-- data: "notify_channels/<id>" and "url". `target` (scheme and host) stays plain: lists
-- show it.
ALTER TABLE notify_channels ADD COLUMN sealed_url text;
ALTER TABLE notify_channels DROP CONSTRAINT notify_channels_url_check;
ALTER TABLE notify_channels ADD CONSTRAINT notify_channels_url_check CHECK (
    (sealed_url IS NULL AND url ~ '^[A-Za-z][A-Za-z0-9+.-]{0,31}://\S+$')
    OR (url = '' AND sealed_url ~ '^v1\.'));

-- The runtime role may UPDATE a channel only to seal or re-seal its URL: every other
-- column keeps its value and the row ends sealed (a URL is never edited in plain text).
CREATE FUNCTION notify_channels_seal_only() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.sealed_url IS NULL OR (NEW.id, NEW.target, NEW.notify_on, NEW.created_by,
            NEW.created_at) IS DISTINCT FROM (OLD.id, OLD.target, OLD.notify_on,
            OLD.created_by, OLD.created_at) THEN
        RAISE EXCEPTION 'notify_channels: an update may only seal the URL'
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER notify_channels_seal_only BEFORE UPDATE ON notify_channels
    FOR EACH ROW EXECUTE FUNCTION notify_channels_seal_only();

-- The sealing pass finds URLs still in plain text without a scan of sealed ones.
CREATE INDEX notify_channels_plaintext_idx ON notify_channels (id) WHERE sealed_url IS NULL;
