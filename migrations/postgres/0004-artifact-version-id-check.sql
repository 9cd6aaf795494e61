-- additive: true
-- A recorded S3 VersionId is an identity only when it names a version: the literal "null"
-- (what S3 reports for an object written while versioning was off) and the empty string do
-- not, and a DELETE by either could remove another object's bytes. New rows are refused;
-- NOT VALID leaves rows written before this migration to the sweeper and the read path,
-- which report them as artifact_integrity_mismatch (ADR-0379 §3.1). Adding a NOT VALID
-- check scans nothing, so it is safe while older replicas run.
ALTER TABLE run_attempt_log_artifacts
    ADD CONSTRAINT run_attempt_log_artifacts_version_id_names_a_version
    CHECK (version_id IS NULL OR version_id NOT IN ('', 'null')) NOT VALID;
