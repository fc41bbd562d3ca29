-- Symbol lookup over L1 chunks: $2 lowered name as '%...%' (trigram index); exact ($3 as given, then lowered $4) > prefix ($5) > substring.
WITH cand AS (
    SELECT m.id, m.agent_id, m.text, m.metadata, m.source_path, m.line_start, m.line_end, m.section_title, m.breadcrumb, m.level,
           coalesce(m.metadata->>'symbol', m.section_title) AS sym,
           coalesce(m.metadata->>'symbol_name', m.section_title) AS name
      FROM memories m
     WHERE m.org_id = $1 AND m.kind = 'document_chunk' AND m.level = 1
       AND lower(coalesce(m.metadata->>'symbol', m.section_title)) LIKE $2
       AND ($7::text[] IS NULL OR m.metadata->>'collection' = ANY($7::text[]))
       AND ($8::text IS NULL OR m.agent_id = $8)
       AND ($9::text IS NULL OR m.source_path LIKE $9)
)
SELECT c.*,
       CASE WHEN c.sym = $3 OR c.name = $3 THEN 1.0
            WHEN lower(c.sym) = $4 OR lower(c.name) = $4 THEN 0.9
            WHEN lower(c.name) LIKE $5 OR lower(c.sym) LIKE $5 THEN 0.7
            ELSE 0.5 END::float8 AS score
  FROM cand c
 ORDER BY score DESC, length(c.sym), c.source_path, c.line_start, c.id
 LIMIT $6
