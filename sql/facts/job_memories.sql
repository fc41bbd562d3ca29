-- A consolidation job's memories: the new one and its candidates ($2), live, with what the model is shown and what a decision checks (current, scope, event time).
SELECT id, agent_id, kind, key, text, occurred_at, superseded_by FROM memories
 WHERE org_id = $1 AND id = ANY($2::uuid[]) AND (expires_at IS NULL OR expires_at > now())
