"""qinglong.local.storage."""
