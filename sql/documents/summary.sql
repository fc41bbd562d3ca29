-- The whole index summary in one statement (one snapshot, so revision and counts agree); $2 = current embedder, $3 = dirty list size.
WITH state AS (
    SELECT coalesce(max(revision), 0)::bigint AS revision, max(last_indexed_at) AS last_indexed_at
      FROM document_index_state WHERE org_id = $1
), files AS (
    SELECT collection, language, count(*)::bigint AS files, sum(line_count)::bigint AS lines,
           sum(byte_count)::bigint AS bytes, max(indexed_at) AS last_indexed_at
      FROM documents WHERE org_id = $1
     GROUP BY collection, language
), per_file AS (
    SELECT metadata->>'collection' AS collection, source_path AS path, level,
           coalesce(metadata->>'language', 'unknown') AS language, count(*)::int AS n,
           count(*) FILTER (WHERE embedding IS NULL)::int AS unembedded
      FROM memories
     WHERE org_id = $1 AND kind = 'document_chunk'
     GROUP BY 1, 2, 3, 4
), chunks AS (
    SELECT level, language, sum(n)::bigint AS chunks, sum(unembedded)::bigint AS missing_embeddings
      FROM per_file GROUP BY level, language
), file_chunks AS (
    SELECT collection, path, sum(n)::int AS n, sum(unembedded)::int AS unembedded
      FROM per_file GROUP BY collection, path
), dirty AS (
    SELECT d.collection, d.path, coalesce(c.unembedded, 0) AS unembedded,
           d.embedder IS DISTINCT FROM $2::text AS other_embedder,
           coalesce(c.n, 0) <> d.l0_chunks + d.l1_chunks + d.l2_chunks AS count_mismatch
      FROM documents d
      LEFT JOIN file_chunks c ON c.collection = d.collection AND c.path = d.path
     WHERE d.org_id = $1
       AND (coalesce(c.unembedded, 0) > 0 OR d.embedder IS DISTINCT FROM $2::text
            OR coalesce(c.n, 0) <> d.l0_chunks + d.l1_chunks + d.l2_chunks)
)
SELECT s.revision, s.last_indexed_at,
       (SELECT coalesce(jsonb_agg(to_jsonb(f) ORDER BY f.collection, f.language), '[]') FROM files f) AS files,
       (SELECT coalesce(jsonb_agg(to_jsonb(c) ORDER BY c.level, c.language), '[]') FROM chunks c) AS chunks,
       (SELECT coalesce(jsonb_agg(to_jsonb(x) ORDER BY x.collection, x.path), '[]')
          FROM (SELECT * FROM dirty ORDER BY collection, path LIMIT $3) x) AS dirty,
       (SELECT count(*) FROM dirty)::bigint AS dirty_count,
       (SELECT count(*) FROM dirty WHERE other_embedder)::bigint AS other_embedder,
       (SELECT coalesce(sum(c.n), 0) FROM file_chunks c
         WHERE NOT EXISTS (SELECT 1 FROM documents d
                            WHERE d.org_id = $1 AND d.collection = c.collection AND d.path = c.path))::bigint
           AS orphan_chunks
  FROM state s
