-- The id of the message at position $3 of conversation $2 (its last one, the caller holding its lock), or nothing.
SELECT id FROM memories WHERE org_id = $1 AND conversation_id = $2 AND position = $3
