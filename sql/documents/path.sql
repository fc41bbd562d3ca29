-- Path lookup: chunks at levels $5 whose path has the LIKE prefix $2 and matches the anchored regex $3; $4 (the pattern read as a plain path) ranks first.
SELECT m.id, m.agent_id, m.text, m.metadata, m.source_path, m.line_start, m.line_end, m.section_title, m.breadcrumb, m.level
  FROM memories m
 WHERE m.org_id = $1 AND m.kind = 'document_chunk'
   AND m.level = ANY($5::smallint[])
   AND m.source_path LIKE $2
   AND m.source_path ~ $3
   AND ($7::text[] IS NULL OR m.metadata->>'collection' = ANY($7::text[]))
   AND ($8::text IS NULL OR m.agent_id = $8)
   AND ($9::text IS NULL OR m.source_path LIKE $9)
 ORDER BY m.source_path = $4 DESC, length(m.source_path), m.source_path, m.level, m.line_start, m.id
 LIMIT $6
