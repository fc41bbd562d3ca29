-- A page of documents ordered by (collection, path), keyset-paginated; collection and path prefix filters are optional.
SELECT collection, path, agent_id, content_hash, language, line_count, byte_count,
       l0_chunks, l1_chunks, l2_chunks, embedder, chunker, metadata, created_at, indexed_at
  FROM documents
 WHERE org_id = $1
   AND ($2::text IS NULL OR collection = $2)
   AND ($3::text IS NULL OR path LIKE $3)
   AND ($4::text IS NULL OR (collection, path) > ($4, $5::text))
 ORDER BY collection, path
 LIMIT $6
