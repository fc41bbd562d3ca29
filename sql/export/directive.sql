-- The agent's directive as one NDJSON line (no row: it has none).
SELECT (jsonb_build_object('type', 'directive') || to_jsonb(d))::text
  FROM directives d
 WHERE d.org_id = $1 AND d.agent_id = $2
