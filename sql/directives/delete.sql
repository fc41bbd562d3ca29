-- Delete an agent's directive: its text goes and its row stays with its version, so that the agent's next
-- directive takes the version after it and a version never names two texts. Returns that version.
UPDATE directives SET content = NULL, updated_at = now()
 WHERE org_id = $1 AND agent_id = $2 AND content IS NOT NULL
RETURNING version
