-- Exact lookup, case-sensitive (LIKE) substring $2 via the trigram index ($3 is the escaped '%...%' pattern); L2 first, then occurrences.
SELECT m.id, m.agent_id, m.text, m.metadata, m.source_path, m.line_start, m.line_end, m.section_title, m.breadcrumb, m.level,
       (length(m.text) - length(replace(m.text, $2, ''))) / length($2) AS occurrences
  FROM memories m
 WHERE m.org_id = $1 AND m.kind = 'document_chunk'
   AND m.text LIKE $3
   AND ($5::text[] IS NULL OR m.metadata->>'collection' = ANY($5::text[]))
   AND ($6::text IS NULL OR m.agent_id = $6)
   AND ($7::text IS NULL OR m.source_path LIKE $7)
   AND ($8::smallint[] IS NULL OR m.level = ANY($8))
 ORDER BY m.level = 2 DESC, occurrences DESC, m.level DESC, m.source_path, m.line_start, m.id
 LIMIT $4
