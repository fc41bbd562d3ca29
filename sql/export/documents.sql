-- (A null agent ($2): the whole org, agents and org-wide rows.) The documents (ingested files) the agent owns, one NDJSON line each, by collection and path.
SELECT (jsonb_build_object('type', 'document') || to_jsonb(d))::text AS line
  FROM documents d
 WHERE d.org_id = $1 AND ($2::text IS NULL OR d.agent_id = $2)
 ORDER BY d.collection, d.path
