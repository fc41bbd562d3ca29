-- Delete one memory; returns its agent (for cache invalidation) or nothing if absent.
DELETE FROM memories WHERE org_id = $1 AND id = $2 RETURNING id, agent_id
