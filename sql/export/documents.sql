-- The documents (ingested files) the agent owns, one NDJSON line each, by collection and path.
SELECT (jsonb_build_object('type', 'document') || to_jsonb(d))::text AS line
  FROM documents d
 WHERE d.org_id = $1 AND d.agent_id = $2
 ORDER BY d.collection, d.path
