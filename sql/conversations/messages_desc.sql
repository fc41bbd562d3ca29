-- A page of conversation $2's messages from the last back, before position $3; $4: only this session's.
SELECT id, conversation_id, position, message_id, session_id, speaker, role, text, occurred_at, created_at, metadata
  FROM memories
 WHERE org_id = $1 AND conversation_id = $2 AND position < $3
   AND ($4::text IS NULL OR session_id = $4)
 ORDER BY position DESC
 LIMIT $5
