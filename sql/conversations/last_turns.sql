-- The messages of conversation $2 after position $3, in order: the turns before an append, from which its messages' search contexts are derived.
SELECT position, session_id, speaker, role, text
  FROM memories
 WHERE org_id = $1 AND conversation_id = $2 AND position > $3
 ORDER BY position
