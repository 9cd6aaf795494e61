"""Cluster control plane (PostgreSQL authority, retention, dispatch, HTTP API): issue 4."""
