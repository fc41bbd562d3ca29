-- After an append that wrote messages: the conversation's message count (its last position) and last append time.
UPDATE conversations SET message_count = $3, updated_at = now() WHERE org_id = $1 AND id = $2
