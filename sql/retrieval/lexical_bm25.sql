-- BM25 over impact-ordered postings (at most $3 per query term), best $4 ids, then live rows passing the filters
-- ($8-$16, see service.retrieval.filters). Rows carry agent, metadata, event time and (messages) their place in
-- their conversation for the results.
-- $17: for context assembly, the best $5 rows of agent $18 (and org-wide ones when $19) among the scored ones
-- (others' rows do not take the places), with the scoring fields it needs (embedding, last access), saving it a
-- second read.
-- $20: weight of search_context terms (BM25F: tf + $20 * ctx_tf, doc_len + $20 * ctx_len; migration 0008).
-- $21-$22: sources and collections filters (with $17, agent $18's own document chunks whatever their collection);
-- $23: with $17, whether org-wide document chunks are kept
-- (service.retrieval.filters.source_args).
-- $24/$25: which memories count (service.retrieval.filters.currency_args): valid at $24 when set; else all when $25; else
-- the current ones (not superseded, valid time not ended).
-- $26: conversations filter (service.retrieval.filters.conversation_args): messages only from these.
WITH q AS (
    SELECT lexeme AS term FROM unnest(to_tsvector('english', $2::text))
), stats AS (
    SELECT greatest(sum(n_docs), 1)::float8 AS n,
           greatest(sum(total_len) + $20::float8 * sum(ctx_total_len), 1)::float8 / greatest(sum(n_docs), 1) AS avgdl
      FROM memory_lex_stats WHERE org_id = $1
), terms AS MATERIALIZED (
    -- Per term, once: the BM25 weight idf * (k1 + 1) and the length normalisation's two constants, so
    -- each posting below costs one division (not the idf's logarithm and numeric casts).
    SELECT q.term, ln(1 + (s.n - f.df + 0.5) / (f.df + 0.5)) * ($6::float8 + 1) AS w,
           $6::float8 * (1 - $7::float8) AS c0, $6::float8 * $7::float8 / s.avgdl AS c1
      FROM q CROSS JOIN stats s
     CROSS JOIN LATERAL (SELECT coalesce(sum(d.df), 0)::float8 AS df
                           FROM memory_term_df d WHERE d.org_id = $1 AND d.term = q.term) AS f
     WHERE f.df > 0
), scored AS (
    SELECT p.memory_id,
           sum(t.w * p.tf / (p.tf + t.c0 + t.c1 * p.doc_len)) AS score
      FROM terms t
     CROSS JOIN LATERAL (SELECT memory_id, tf + $20::float8 * ctx_tf AS tf, doc_len + $20::float8 * ctx_len AS doc_len
                           FROM memory_postings p
                          WHERE p.org_id = $1 AND p.term = t.term AND (p.tf > 0 OR $20::float8 > 0)
                          ORDER BY p.impact DESC LIMIT $3) AS p
     GROUP BY p.memory_id
     ORDER BY score DESC
     LIMIT $4
), best AS (
    SELECT m.id, m.text, m.kind, m.source_path, m.line_start, m.line_end, m.level, m.breadcrumb, s.score,
           m.agent_id, m.importance, m.usefulness, m.pinned, m.created_at, m.embedding, m.org_id,
           m.metadata, m.occurred_at, m.superseded_by, m.valid_until,
           m.conversation_id, m.position, m.session_id, m.speaker, m.role, m.message_id
      FROM scored s
      JOIN memories m ON m.org_id = $1 AND m.id = s.memory_id
     WHERE (m.expires_at IS NULL OR m.expires_at > now())
       AND ($8::text IS NULL OR m.agent_id = $8)
       AND ($9::text[] IS NULL OR m.kind = ANY($9))
       AND ($10::jsonb IS NULL OR m.metadata @> $10)
       AND ($11::timestamptz IS NULL OR m.created_at >= $11)
       AND ($12::timestamptz IS NULL OR m.created_at < $12)
       AND ($13::text IS NULL OR m.source_path LIKE $13)
       AND ($14::smallint[] IS NULL OR m.level = ANY($14))
       AND ($15::timestamptz IS NULL OR m.occurred_at >= $15)
       AND ($16::timestamptz IS NULL OR m.occurred_at < $16)
       AND ($21::text[] IS NULL OR (CASE m.kind WHEN 'document_chunk' THEN 'documents' WHEN 'message' THEN 'messages'
                                    ELSE 'memories' END) = ANY($21))
       AND ($22::text[] IS NULL OR m.kind <> 'document_chunk' OR m.metadata->>'collection' = ANY($22)
            OR ($17::bool AND m.agent_id = $18::text))
       AND ($26::text[] IS NULL OR m.kind <> 'message' OR m.conversation_id = ANY($26))
       AND (NOT $17::bool OR m.agent_id = $18::text
            OR ($19::bool AND m.agent_id IS NULL AND ($23::bool OR m.kind <> 'document_chunk')))
       AND CASE WHEN $24::timestamptz IS NOT NULL THEN m.occurred_at <= $24 AND (m.valid_until IS NULL OR m.valid_until > $24)
                WHEN $25::bool THEN true
                ELSE m.superseded_by IS NULL AND (m.valid_until IS NULL OR m.valid_until > now()) END
     ORDER BY s.score DESC, m.id
     LIMIT $5
)
SELECT b.id, b.text, b.kind, b.source_path, b.line_start, b.line_end, b.level, b.breadcrumb, b.score,
       b.agent_id, b.importance, b.usefulness, b.pinned, b.created_at, b.metadata, b.occurred_at,
       b.superseded_by, b.valid_until,
       b.conversation_id, b.position, b.session_id, b.speaker, b.role, b.message_id,
       CASE WHEN $17::bool THEN b.embedding END AS embedding,
       CASE WHEN $17::bool THEN (SELECT a.last_accessed_at FROM memory_access a
                                  WHERE a.org_id = b.org_id AND a.memory_id = b.id) END AS last_accessed_at
  FROM best b
 ORDER BY b.score DESC, b.id
