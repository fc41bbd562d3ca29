-- The current memory holding key $3 in agent scope $2 (null: org-wide), locked, with its valid time.
SELECT id, occurred_at, valid_until, text FROM memories
 WHERE org_id = $1 AND agent_id IS NOT DISTINCT FROM $2 AND key = $3 AND superseded_by IS NULL
 FOR UPDATE
