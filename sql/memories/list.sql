-- A page of live memories, newest first, keyset-paginated on (created_at, id); filters are optional ($10/$11: occurred_at range).
-- $12/$13: which memories count (service.memories.facts): valid at $12 (valid time) when set; else every one when $13; else the
-- current ones only (not superseded, valid time not ended).
SELECT m.*, coalesce(a.access_count, 0) AS access_count, a.last_accessed_at
  FROM memories m
  LEFT JOIN memory_access a ON a.org_id = m.org_id AND a.memory_id = m.id
 WHERE m.org_id = $1
   AND (m.expires_at IS NULL OR m.expires_at > now())
   AND ($2::text IS NULL OR m.agent_id = $2)
   AND ($3::text IS NULL OR m.kind = $3)
   AND ($4::jsonb IS NULL OR m.metadata @> $4)
   AND ($5::timestamptz IS NULL OR m.created_at >= $5)
   AND ($6::timestamptz IS NULL OR m.created_at < $6)
   AND ($10::timestamptz IS NULL OR m.occurred_at >= $10)
   AND ($11::timestamptz IS NULL OR m.occurred_at < $11)
   AND ($7::timestamptz IS NULL OR (m.created_at, m.id) < ($7, $8::uuid))
   AND CASE WHEN $12::timestamptz IS NOT NULL THEN m.occurred_at <= $12 AND (m.valid_until IS NULL OR m.valid_until > $12)
            WHEN $13::bool THEN true
            ELSE m.superseded_by IS NULL AND (m.valid_until IS NULL OR m.valid_until > now()) END
 ORDER BY m.created_at DESC, m.id DESC
 LIMIT $9
