-- The agent a memory belongs to before an update (for cache invalidation of both old and new agent).
SELECT agent_id FROM memories WHERE org_id = $1 AND id = $2
