-- Revoke every active key of org $1 (the first step of deleting it); returns how many.
WITH revoked AS (
    UPDATE api_keys SET revoked_at = now() WHERE org_id = $1 AND revoked_at IS NULL RETURNING id
)
SELECT count(*) FROM revoked
