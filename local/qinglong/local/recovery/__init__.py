"""qinglong.local.recovery."""
