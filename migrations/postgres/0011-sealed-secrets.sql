-- additive: true
-- Secret variable values sealed at rest (docs/operations.md "Secret values at rest";
-- control/qinglong/control/secrets/). Expand step: a new column for sealed values beside the
-- plaintext `env`; the plaintext of a sealed value is cleared by the replica that seals it,
-- and a later release drops nothing of `env` (non-secret values stay there) but may forbid a
-- secret entry carrying a "value".
--
-- tasks.sealed_env: {"NAME": "v1.<key id>.<nonce>.<ciphertext>"} for every secret variable
-- of the task whose value is sealed; the matching tasks.env entry keeps {"secret": true} and
-- no "value". Associated data: the task id and the variable name.
ALTER TABLE tasks ADD COLUMN sealed_env jsonb
    CHECK (sealed_env IS NULL OR jsonb_typeof(sealed_env) = 'object');

-- The deployment-wide switch (one row at most): present = sealing is on. Written by
-- `ql3 control secrets enable` / `rotate-key`; `primary_key_id` is the primary the last of
-- them asked for (status shows how many values are sealed with another key). Never deleted:
-- turning sealing off is not an operation (the runtime role has no DELETE).
CREATE TABLE secret_sealing (
    singleton       boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    primary_key_id  text NOT NULL CHECK (primary_key_id ~ '^[A-Za-z0-9_-]{1,64}$'),
    enabled_by      text NOT NULL,
    enabled_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now()
);

-- The sealing pass finds rows that still hold a secret's plaintext without a scan of
-- values: a partial index over live and deleted tasks alike (a deleted task's env is kept).
CREATE INDEX tasks_plaintext_secret_idx ON tasks (id)
    WHERE jsonb_path_exists(env, '$.* ? (@.secret == true && exists(@.value))');
