-- additive: true
-- Placeholder for migration 0007, which lands from another branch: drop this file when merging.
SELECT 1;
