-- Drop an idempotency key older than its 24-hour window so it can be claimed again.
DELETE FROM idempotency_keys WHERE org_id = $1 AND key = $2 AND created_at <= now() - interval '24 hours'
