-- Every memory row the agent owns, one NDJSON line each (every column but the derived embedding and tsvector, plus access statistics): its memories, expired or not, oldest first, then its document chunks by file and line ("type": "chunk").
SELECT m.kind = 'document_chunk' AS chunk,
       (jsonb_build_object('type', CASE WHEN m.kind = 'document_chunk' THEN 'chunk' ELSE 'memory' END,
                           'access_count', coalesce(a.access_count, 0),
                           'last_accessed_at', a.last_accessed_at)
        || (to_jsonb(m) - 'embedding' - 'tsv'))::text AS line
  FROM memories m
  LEFT JOIN memory_access a ON a.org_id = m.org_id AND a.memory_id = m.id
 WHERE m.org_id = $1 AND m.agent_id = $2
 ORDER BY m.kind = 'document_chunk', m.source_path, m.level, m.line_start, m.created_at, m.id
