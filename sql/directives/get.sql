-- An agent's directive.
SELECT agent_id, content, version, updated_at FROM directives WHERE org_id = $1 AND agent_id = $2
