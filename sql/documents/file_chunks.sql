-- The chunks of one file of a collection at the given levels (null: all), in (level, line_start) order.
SELECT id, agent_id, text, metadata, source_path, line_start, line_end, section_title, breadcrumb, level,
       embedding IS NOT NULL AS embedded
  FROM memories
 WHERE org_id = $1 AND kind = 'document_chunk'
   AND source_path = $3 AND metadata->>'collection' = $2
   AND ($4::smallint[] IS NULL OR level = ANY($4))
 ORDER BY level, line_start, line_end, id
