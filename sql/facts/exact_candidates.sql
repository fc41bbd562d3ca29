-- Exact-duplicate candidates: current (not superseded, valid time not ended), live memories of the org whose normalized-text hash is one of $2 (memories_current_text_hash), with what the write path compares (scope, kind, key).
SELECT m.id, m.agent_id, m.kind, m.key, m.text, m.text_hash
  FROM memories m
 WHERE m.org_id = $1 AND m.text_hash = ANY($2::bytea[]) AND m.superseded_by IS NULL
   AND (m.valid_until IS NULL OR m.valid_until > now()) AND (m.expires_at IS NULL OR m.expires_at > now())
   AND m.id <> ALL($3::uuid[])
