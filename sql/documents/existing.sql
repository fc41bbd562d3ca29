-- The stored state of some paths of a collection (hash, owner, metadata, embedder, chunking version, counts), to skip unchanged files.
SELECT path, content_hash, agent_id, metadata, embedder, chunker, language, l0_chunks, l1_chunks, l2_chunks
  FROM documents
 WHERE org_id = $1 AND collection = $2 AND path = ANY($3::text[])
