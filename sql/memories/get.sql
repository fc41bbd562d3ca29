-- One live (unexpired) memory by id.
SELECT * FROM memories
 WHERE org_id = $1 AND id = $2 AND (expires_at IS NULL OR expires_at > now())
