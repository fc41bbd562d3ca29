-- Memories a write names in `supersedes` ($2), locked: whether each exists (live), its kind, scope, event time and whether it is already retired.
SELECT id, agent_id, kind, key, occurred_at, superseded_by FROM memories
 WHERE org_id = $1 AND id = ANY($2::uuid[]) AND (expires_at IS NULL OR expires_at > now())
 ORDER BY id
 FOR UPDATE
