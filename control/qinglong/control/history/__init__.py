"""Cluster history pruning (docs/operations.md "History pruning")."""
