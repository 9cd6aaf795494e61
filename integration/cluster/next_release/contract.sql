-- additive: false
-- A contract step ahead of release N (integration/cluster/test_cluster_rolling_upgrade.py):
-- script bundles never shipped, so a later release drops the column. Release N still reads
-- it when it claims, so N must report schema_newer_than_code rather than serve.
ALTER TABLE tasks DROP COLUMN entry_point;
