-- Create or replace an agent's directive; the version goes up by one on every write.
INSERT INTO directives AS d (org_id, agent_id, content) VALUES ($1, $2, $3)
ON CONFLICT (org_id, agent_id) DO UPDATE
   SET content = EXCLUDED.content, version = d.version + 1, updated_at = now()
RETURNING agent_id, content, version, updated_at
