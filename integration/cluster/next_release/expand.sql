-- additive: true
-- Release "N+1" of the rolling-upgrade test (integration/cluster/test_cluster_rolling_upgrade.py),
-- an expand step: when a worker pool last had attempts handed out. A nullable column without a
-- default (no table rewrite): release N neither reads nor writes it. The runtime role's UPDATE
-- on worker_pools is in N+1's reviewed grants (next_release.py), set by N+1's migrate.
ALTER TABLE worker_pools ADD COLUMN last_claim_at timestamptz;
