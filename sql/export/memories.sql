-- (A null agent ($2): the whole org, agents and org-wide rows.) The agent's memories (not its document chunks), expired or not (what is held), oldest first (an order the (org_id, agent_id, created_at, id) index can serve without a sort), one NDJSON line each: every column but the derived embedding and tsvector, plus access statistics.
SELECT (jsonb_build_object('type', 'memory', 'access_count', coalesce(a.access_count, 0),
                           'last_accessed_at', a.last_accessed_at)
        || (to_jsonb(m) - 'embedding' - 'tsv'))::text AS line
  FROM memories m
  LEFT JOIN memory_access a ON a.org_id = m.org_id AND a.memory_id = m.id
 WHERE m.org_id = $1 AND ($2::text IS NULL OR m.agent_id = $2) AND m.kind <> 'document_chunk'
 ORDER BY m.created_at, m.id
