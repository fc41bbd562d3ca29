-- Cascade step 2: exact cosine ranking of exactly the given ids (ordering by the score, not the <=> operator, keeps HNSW out).
SELECT m.id, m.text, m.kind, m.source_path, m.level, m.breadcrumb, 1 - (m.embedding <=> $2::vector) AS score,
       m.agent_id, m.metadata, m.occurred_at, m.superseded_by, m.valid_until, m.conversation_id, m.position,
       m.session_id, m.speaker, m.role, m.message_id
  FROM memories m
 WHERE m.org_id = $1
   AND m.id = ANY($3::uuid[])
   AND m.embedding IS NOT NULL
   AND (m.expires_at IS NULL OR m.expires_at > now())
 ORDER BY score DESC, m.id
 LIMIT $4
