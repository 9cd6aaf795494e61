"""Local profile (edge, standalone): SQLite storage, process launcher, recovery, app root."""
