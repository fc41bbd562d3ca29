-- (A null agent ($2): the whole org, agents and org-wide rows.) The document chunks the agent owns, by file, level and line, one NDJSON line each: every column but the derived embedding and tsvector, plus access statistics.
SELECT (jsonb_build_object('type', 'chunk', 'access_count', coalesce(a.access_count, 0),
                           'last_accessed_at', a.last_accessed_at)
        || (to_jsonb(m) - 'embedding' - 'tsv'))::text AS line
  FROM memories m
  LEFT JOIN memory_access a ON a.org_id = m.org_id AND a.memory_id = m.id
 WHERE m.org_id = $1 AND ($2::text IS NULL OR m.agent_id = $2) AND m.kind = 'document_chunk'
 ORDER BY m.source_path, m.level, m.line_start, m.id
