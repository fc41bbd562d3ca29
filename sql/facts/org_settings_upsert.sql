-- Set the org's defaults (null leaves a field as it is); returns the row.
INSERT INTO org_settings AS s (org_id, on_duplicate)
VALUES ($1, coalesce($2::text, 'merge'))
ON CONFLICT (org_id) DO UPDATE SET on_duplicate = coalesce($2::text, s.on_duplicate), updated_at = now()
RETURNING on_duplicate, updated_at
