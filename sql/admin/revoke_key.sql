-- Revoke an active key by id ($1) or by hash ($2); returns the revoked key's id.
UPDATE api_keys SET revoked_at = now()
 WHERE revoked_at IS NULL AND (id = $1 OR key_hash = $2)
RETURNING id
