-- additive: true
-- Placeholder on this branch only: number 0007 belongs to the global-variables migration
-- being written beside this one. The loader refuses a gap, so this empty file stands in
-- until that migration lands; it is then replaced by it (the pinned count stays 8 and the
-- pinned checksum is 0008's).
SELECT 1;
