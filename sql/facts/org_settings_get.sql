-- The org's defaults row (none: never set).
SELECT on_duplicate, updated_at FROM org_settings WHERE org_id = $1
