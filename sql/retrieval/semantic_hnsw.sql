-- Nearest live rows by cosine distance via HNSW (the caller sets iterative scan + ef_search), filters applied.
-- $11: also return the scoring fields context assembly needs (embedding, last access) for the rows of agent $12
-- (and org-wide ones when $13), the only ones it keeps: saves it a second read.
SELECT m.id, m.text, m.kind, m.source_path, m.level, m.breadcrumb, 1 - (m.embedding <=> $2::vector) AS score,
       m.agent_id, m.importance, m.usefulness, m.pinned, m.created_at,
       CASE WHEN $11::bool AND (m.agent_id = $12::text OR ($13::bool AND m.agent_id IS NULL))
            THEN m.embedding END AS embedding,
       CASE WHEN $11::bool AND (m.agent_id = $12::text OR ($13::bool AND m.agent_id IS NULL))
            THEN (SELECT a.last_accessed_at FROM memory_access a
                                  WHERE a.org_id = m.org_id AND a.memory_id = m.id) END AS last_accessed_at
  FROM memories m
 WHERE m.org_id = $1
   AND m.embedding IS NOT NULL
   AND (m.expires_at IS NULL OR m.expires_at > now())
   AND ($4::text IS NULL OR m.agent_id = $4)
   AND ($5::text[] IS NULL OR m.kind = ANY($5))
   AND ($6::jsonb IS NULL OR m.metadata @> $6)
   AND ($7::timestamptz IS NULL OR m.created_at >= $7)
   AND ($8::timestamptz IS NULL OR m.created_at < $8)
   AND ($9::text IS NULL OR m.source_path LIKE $9)
   AND ($10::smallint[] IS NULL OR m.level = ANY($10))
 ORDER BY m.embedding <=> $2::vector
 LIMIT $3
