-- The org's defaults (org_settings) as one NDJSON line, in a whole-org export only ($2 null); no row: an agent's export, or an org that never set them.
SELECT jsonb_build_object('type', 'settings', 'on_duplicate', s.on_duplicate, 'updated_at', s.updated_at)::text
  FROM org_settings s
 WHERE s.org_id = $1 AND $2::text IS NULL
