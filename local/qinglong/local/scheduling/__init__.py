"""qinglong.local.scheduling."""
