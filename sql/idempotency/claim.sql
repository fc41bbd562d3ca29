-- Claim an idempotency key for this request; returns nothing if the key was already used.
INSERT INTO idempotency_keys (org_id, key, request_hash) VALUES ($1, $2, $3)
ON CONFLICT (org_id, key) DO NOTHING
RETURNING key
