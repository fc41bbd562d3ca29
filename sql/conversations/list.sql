-- A page of conversations, newest first, keyset-paginated on (created_at, id); $2: only this agent's.
SELECT id, agent_id, message_count, created_at, updated_at
  FROM conversations
 WHERE org_id = $1
   AND ($2::text IS NULL OR agent_id = $2)
   AND ($3::timestamptz IS NULL OR (created_at, id) < ($3, $4::text))
 ORDER BY created_at DESC, id DESC
 LIMIT $5
