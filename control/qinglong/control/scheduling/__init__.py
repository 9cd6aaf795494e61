"""Leaderless scheduling of the cluster profile (DESIGN.md §4.2): run creation, the
occurrence ledger, the scheduler service."""
