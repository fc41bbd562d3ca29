-- Delete an agent's directive; returns its last version.
DELETE FROM directives WHERE org_id = $1 AND agent_id = $2 RETURNING version
