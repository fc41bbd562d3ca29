-- Delete conversation $2 (its remaining messages go with it: ON DELETE CASCADE); returns the messages it held (its message_count, its last position), or nothing if absent.
DELETE FROM conversations WHERE org_id = $1 AND id = $2 RETURNING message_count
