-- Lock conversation $2 for its removal (an append under way commits first, a later one waits); returns its id, or nothing if absent.
SELECT id FROM conversations WHERE org_id = $1 AND id = $2 FOR UPDATE
