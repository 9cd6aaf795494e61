"""qinglong.local.app."""
