"""Remote dispatch with fenced leases (docs/protocols.md §4.2): worker incarnations, claims, lease
writes (started, heartbeat, log upload, completion) and the lease-recovery sweep. One protocol
step per module; the statements are named SQL in ``queries.sql``."""
