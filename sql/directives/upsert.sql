-- Create or replace an agent's directive; the version goes up by one on every write that changes the text (the
-- same text again, a retried PUT, changes nothing). A deleted directive's row (content NULL) keeps its version:
-- the new text takes the next one.
INSERT INTO directives AS d (org_id, agent_id, content) VALUES ($1, $2, $3)
ON CONFLICT (org_id, agent_id) DO UPDATE
   SET content = EXCLUDED.content,
       version = CASE WHEN d.content = EXCLUDED.content THEN d.version ELSE d.version + 1 END,
       created_at = CASE WHEN d.content IS NULL THEN now() ELSE d.created_at END,
       updated_at = CASE WHEN d.content = EXCLUDED.content THEN d.updated_at ELSE now() END
RETURNING agent_id, content, version, updated_at
