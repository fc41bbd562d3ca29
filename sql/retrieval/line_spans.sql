-- Modes search: the file line span of lexical/semantic hits $2 (null for memories that are not document chunks).
SELECT m.id, m.line_start, m.line_end
  FROM memories m
 WHERE m.org_id = $1
   AND m.id = ANY($2::uuid[])
