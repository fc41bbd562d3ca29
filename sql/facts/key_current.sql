-- The current memory holding key $3 in agent scope $2 (null: org-wide), locked, with its valid time, kind and
-- normalized-text hash (is it the duplicate a write of the key found?). The scope is written as `agent_id = $2 OR ($2 IS NULL AND agent_id IS NULL)`, which the custom plan folds into an index condition (IS NOT DISTINCT FROM is none).
SELECT id, occurred_at, valid_until, text, kind, text_hash FROM memories
 WHERE org_id = $1 AND (agent_id = $2 OR ($2::text IS NULL AND agent_id IS NULL)) AND key = $3 AND superseded_by IS NULL
 FOR UPDATE
