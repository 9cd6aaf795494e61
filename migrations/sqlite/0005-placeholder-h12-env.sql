-- 0005-placeholder-h12-env: holds number 5 on branch h12-env only, so 0006 loads (the loader
-- wants 1..N without gaps). Another branch owns 0005; the merge drops this file.
SELECT 1;
