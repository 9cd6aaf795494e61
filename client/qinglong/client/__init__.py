"""``ql3 cluster``: the command-line client of the cluster's control API (HTTP only)."""
