-- After an append that wrote messages, or the removal of its last ones: the conversation's message count (its last position) and the time its messages last changed.
UPDATE conversations SET message_count = $3, updated_at = now() WHERE org_id = $1 AND id = $2
