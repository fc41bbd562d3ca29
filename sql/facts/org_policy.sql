-- The org's default on_duplicate policy (no row: the service default).
SELECT on_duplicate FROM org_settings WHERE org_id = $1
