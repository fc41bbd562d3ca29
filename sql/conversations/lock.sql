-- Lock conversation $2 for a removal (an append under way commits first, a later one waits); returns its id, agent (null: org-wide) and message count, or nothing if absent.
SELECT id, agent_id, message_count FROM conversations WHERE org_id = $1 AND id = $2 FOR UPDATE
