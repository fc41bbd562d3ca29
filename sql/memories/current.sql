-- Owner agent and kind of a memory before a change (cache invalidation; document chunks are read-only here).
SELECT agent_id, kind FROM memories WHERE org_id = $1 AND id = $2 FOR UPDATE
