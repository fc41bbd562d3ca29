-- The agent's directive (or, with a null agent, every directive of the org, by agent) as NDJSON lines (no row: none).
SELECT (jsonb_build_object('type', 'directive') || to_jsonb(d))::text AS line
  FROM directives d
 WHERE d.org_id = $1 AND ($2::text IS NULL OR d.agent_id = $2)
 ORDER BY d.agent_id
