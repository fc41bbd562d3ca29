-- Nearest document chunks to the query vector $2 by cosine distance (caller sets the HNSW scan), filters optional.
SELECT m.id, m.agent_id, m.text, m.metadata, m.source_path, m.line_start, m.line_end, m.section_title, m.breadcrumb, m.level, 1 - (m.embedding <=> $2::vector) AS score
  FROM memories m
 WHERE m.org_id = $1 AND m.kind = 'document_chunk' AND m.embedding IS NOT NULL
   AND ($4::text[] IS NULL OR m.metadata->>'collection' = ANY($4::text[]))
   AND ($5::text IS NULL OR m.agent_id = $5)
   AND ($6::text IS NULL OR m.source_path LIKE $6)
   AND ($7::smallint[] IS NULL OR m.level = ANY($7))
 ORDER BY m.embedding <=> $2::vector
 LIMIT $3
