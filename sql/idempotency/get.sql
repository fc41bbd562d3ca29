-- The stored request hash and response of an idempotency key, if it was used in the last 24 hours.
SELECT request_hash, response FROM idempotency_keys
 WHERE org_id = $1 AND key = $2 AND created_at > now() - interval '24 hours'
