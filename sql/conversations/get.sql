-- One conversation.
SELECT id, agent_id, message_count, created_at, updated_at FROM conversations WHERE org_id = $1 AND id = $2
