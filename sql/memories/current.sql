-- Owner agent, kind and conversation of a memory before a change (cache invalidation; document chunks and messages are read-only here).
SELECT agent_id, kind, conversation_id FROM memories WHERE org_id = $1 AND id = $2 FOR UPDATE
