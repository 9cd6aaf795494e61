"""qinglong.local.process."""
