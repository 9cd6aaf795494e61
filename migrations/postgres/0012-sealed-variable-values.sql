-- additive: true
-- Secret values of the cluster's global variables sealed at rest, as 0011 does for tasks
-- (docs/operations.md "Secret values at rest"; control/qinglong/control/secrets/store.py).
-- Expand step: a sealed column beside the plaintext `value`. A value of a secret variable
-- written while sealing is on, or sealed later by a replica's batch, keeps `value` = '' and
-- its sealed text in `sealed_value` ("v1.<key id>.<nonce>.<ciphertext>"); associated data:
-- "global_variables/<name>" and the variable's name (not the position: removing a value
-- renumbers the later ones).
ALTER TABLE global_variable_values ADD COLUMN sealed_value text
    CHECK (sealed_value IS NULL OR (value = '' AND sealed_value ~ '^v1\.'));

-- The sealing pass finds values still in plain text without a scan of sealed ones.
CREATE INDEX global_variable_values_plaintext_idx ON global_variable_values (name, position)
    WHERE sealed_value IS NULL;
