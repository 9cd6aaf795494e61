"""qinglong.local.execution."""
