-- A memory's agent, without a lock: the scope a change locks (facts.lock_scopes) before it locks the row (memories.current).
SELECT agent_id FROM memories WHERE org_id = $1 AND id = $2
