-- Remember the response of the request that claimed an idempotency key.
UPDATE idempotency_keys SET response = $3 WHERE org_id = $1 AND key = $2
