-- Nearest live rows by cosine distance via HNSW (the caller sets iterative scan + ef_search), filters applied
-- ($4-$12, see service.retrieval.filters). Rows carry agent, metadata, event time and (messages) their place in
-- their conversation for the results.
-- $13: for context assembly, the nearest $3 rows of agent $14 (and org-wide ones when $15), others passed over
-- during the walk (not cut afterwards: in an org of many agents the others' rows would take the places), with the
-- scoring fields it needs (embedding, last access), saving it a second read.
-- $16-$17: sources and collections filters (with $13, agent $14's own document chunks whatever their collection);
-- $18: with $13, whether org-wide document chunks are kept
-- (service.retrieval.filters.source_args).
-- $19/$20: which memories count (service.retrieval.filters.currency_args): valid at $19 when set; else all when $20;
-- else the current ones (not superseded, valid time not ended).
-- $21: conversations filter (service.retrieval.filters.conversation_args): messages only from these.
WITH nearest AS (
    SELECT m.id, m.text, m.kind, m.source_path, m.line_start, m.line_end, m.level, m.breadcrumb,
           1 - (m.embedding <=> $2::vector) AS score,
           m.agent_id, m.importance, m.usefulness, m.pinned, m.created_at, m.embedding, m.org_id,
           m.metadata, m.occurred_at, m.superseded_by, m.valid_until,
           m.conversation_id, m.position, m.session_id, m.speaker, m.role, m.message_id
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
       AND ($11::timestamptz IS NULL OR m.occurred_at >= $11)
       AND ($12::timestamptz IS NULL OR m.occurred_at < $12)
       AND ($16::text[] IS NULL OR (CASE m.kind WHEN 'document_chunk' THEN 'documents' WHEN 'message' THEN 'messages'
                                    ELSE 'memories' END) = ANY($16))
       AND ($17::text[] IS NULL OR m.kind <> 'document_chunk' OR m.metadata->>'collection' = ANY($17)
            OR ($13::bool AND m.agent_id = $14::text))
       AND ($21::text[] IS NULL OR m.kind <> 'message' OR m.conversation_id = ANY($21))
       AND (NOT $13::bool OR m.agent_id = $14::text
            OR ($15::bool AND m.agent_id IS NULL AND ($18::bool OR m.kind <> 'document_chunk')))
     ORDER BY m.embedding <=> $2::vector
     LIMIT $3
)
SELECT n.id, n.text, n.kind, n.source_path, n.line_start, n.line_end, n.level, n.breadcrumb, n.score,
       n.agent_id, n.importance, n.usefulness, n.pinned, n.created_at, n.metadata, n.occurred_at,
       n.superseded_by, n.valid_until,
       n.conversation_id, n.position, n.session_id, n.speaker, n.role, n.message_id,
       CASE WHEN $13::bool THEN n.embedding END AS embedding,
       CASE WHEN $13::bool THEN (SELECT a.last_accessed_at FROM memory_access a
                                  WHERE a.org_id = n.org_id AND a.memory_id = n.id) END AS last_accessed_at
  FROM nearest n
 WHERE CASE WHEN $19::timestamptz IS NOT NULL THEN n.occurred_at <= $19 AND (n.valid_until IS NULL OR n.valid_until > $19)
            WHEN $20::bool THEN true
            ELSE n.superseded_by IS NULL AND (n.valid_until IS NULL OR n.valid_until > now()) END
