-- Messages of conversation $2 whose caller ids are among $3 (a retried append finds what it already wrote).
SELECT id, message_id, position, session_id, speaker, role, text
  FROM memories
 WHERE org_id = $1 AND conversation_id = $2 AND message_id = ANY($3::text[])
