-- An agent's directive (a deleted one's row holds no content).
SELECT agent_id, content, version, updated_at FROM directives WHERE org_id = $1 AND agent_id = $2 AND content IS NOT NULL
