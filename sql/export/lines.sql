-- (A null agent ($2): the whole org, agents and org-wide rows.) Every row of an export after its header, as (kind, NDJSON line), in one statement so that under READ COMMITTED every line comes from one snapshot: a write committed while the export is read is wholly in it or wholly out (a memory and its history events, a file and its chunks). Each part keeps its own order (UNION ALL appends them in turn; the caller checks that kinds never go back): the org's defaults (whole-org export only), the directives by agent, the documents (ingested files) by collection and path, each with its content (its L2 chunks, which tile the file, joined in order; null when they do not give back its content_hash), the conversations (owner, message count, times; ahead of their messages, so that an import creates each before its messages) oldest first, the memories (not document chunks; expired and retired included) oldest first, the document chunks by file, level and line, the history events (memory_events recorded under the agent) oldest first. Every column but the derived embedding and tsvector, with access statistics.
SELECT part, kind, line FROM (
    (SELECT 0 AS part, 'settings' AS kind,
            jsonb_build_object('type', 'settings', 'on_duplicate', s.on_duplicate, 'updated_at', s.updated_at)::text
              AS line
       FROM org_settings s
      WHERE s.org_id = $1 AND $2::text IS NULL)
    UNION ALL
    (SELECT 1, 'directive', (jsonb_build_object('type', 'directive') || to_jsonb(d))::text
       FROM directives d
      WHERE d.org_id = $1 AND ($2::text IS NULL OR d.agent_id = $2) AND d.content IS NOT NULL
      ORDER BY d.agent_id)
    UNION ALL
    (SELECT 2, 'document', (jsonb_build_object('type', 'document') || to_jsonb(d)
                            || jsonb_build_object('content', f.content))::text
       FROM documents d
       LEFT JOIN LATERAL (
           SELECT whole.content
             FROM (SELECT coalesce(string_agg(c.text, '' ORDER BY c.line_start, c.line_end, c.id), '') AS content
                     FROM memories c
                    WHERE c.org_id = d.org_id AND c.kind = 'document_chunk' AND c.level = 2
                      AND c.source_path = d.path AND c.metadata->>'collection' = d.collection) whole
            WHERE encode(sha256(convert_to(whole.content, 'UTF8')), 'hex') = d.content_hash) f ON true
      WHERE d.org_id = $1 AND ($2::text IS NULL OR d.agent_id = $2)
      ORDER BY d.collection, d.path)
    UNION ALL
    (SELECT 3, 'conversation', (jsonb_build_object('type', 'conversation') || to_jsonb(c))::text
       FROM conversations c
      WHERE c.org_id = $1 AND ($2::text IS NULL OR c.agent_id = $2)
      ORDER BY c.created_at, c.id)
    UNION ALL
    (SELECT 4, 'memory', (jsonb_build_object('type', 'memory', 'access_count', coalesce(a.access_count, 0),
                                             'last_accessed_at', a.last_accessed_at)
                          || (to_jsonb(m) - 'embedding' - 'tsv'))::text
       FROM memories m
       LEFT JOIN memory_access a ON a.org_id = m.org_id AND a.memory_id = m.id
      WHERE m.org_id = $1 AND ($2::text IS NULL OR m.agent_id = $2) AND m.kind <> 'document_chunk'
      ORDER BY m.created_at, m.id)
    UNION ALL
    (SELECT 5, 'chunk', (jsonb_build_object('type', 'chunk', 'access_count', coalesce(a.access_count, 0),
                                            'last_accessed_at', a.last_accessed_at)
                         || (to_jsonb(m) - 'embedding' - 'tsv'))::text
       FROM memories m
       LEFT JOIN memory_access a ON a.org_id = m.org_id AND a.memory_id = m.id
      WHERE m.org_id = $1 AND ($2::text IS NULL OR m.agent_id = $2) AND m.kind = 'document_chunk'
      ORDER BY m.source_path, m.level, m.line_start, m.id)
    UNION ALL
    (SELECT 6, 'event', (jsonb_build_object('type', 'event') || to_jsonb(e))::text
       FROM memory_events e
      WHERE e.org_id = $1 AND ($2::text IS NULL OR e.agent_id = $2)
      ORDER BY e.id)
) parts
