"""Leaderless scheduling of the cluster profile (docs/protocols.md §4.2): run creation, the
occurrence ledger, the scheduler service."""
