-- Insert or replace document rows from parallel arrays, in path order (a stable lock order); returns path and whether it was new.
-- $3: the embedder, $14: the chunking version that cut them.
INSERT INTO documents AS d (org_id, collection, path, agent_id, content_hash, language, line_count, byte_count,
                            l0_chunks, l1_chunks, l2_chunks, embedder, metadata, indexed_at, chunker)
SELECT $1, $2, t.path, t.agent_id, t.content_hash, t.language, t.line_count, t.byte_count,
       t.l0, t.l1, t.l2, $3, t.metadata, now(), $14::smallint
  FROM unnest($4::text[], $5::text[], $6::text[], $7::text[], $8::int[], $9::int[], $10::int[], $11::int[],
              $12::int[], $13::jsonb[]) AS t(path, agent_id, content_hash, language, line_count, byte_count,
                                             l0, l1, l2, metadata)
 ORDER BY t.path
ON CONFLICT (org_id, collection, path) DO UPDATE
   SET agent_id = excluded.agent_id, content_hash = excluded.content_hash, language = excluded.language,
       line_count = excluded.line_count, byte_count = excluded.byte_count, l0_chunks = excluded.l0_chunks,
       l1_chunks = excluded.l1_chunks, l2_chunks = excluded.l2_chunks, embedder = excluded.embedder,
       metadata = excluded.metadata, indexed_at = now(), chunker = excluded.chunker
RETURNING path, (xmax = 0) AS inserted
