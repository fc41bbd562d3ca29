-- Every org with its key and memory counts, oldest first (owner role only: its owner_admin policy sees all orgs; never reads key hashes).
SELECT o.id, o.name, o.created_at,
       coalesce(k.active, 0) AS active_keys, coalesce(k.revoked, 0) AS revoked_keys,
       coalesce(m.memories, 0) AS memories, coalesce(m.chunks, 0) AS document_chunks
  FROM orgs o
  LEFT JOIN LATERAL (
      SELECT count(*) FILTER (WHERE revoked_at IS NULL) AS active, count(*) FILTER (WHERE revoked_at IS NOT NULL) AS revoked
        FROM api_keys WHERE org_id = o.id) k ON true
  LEFT JOIN LATERAL (
      SELECT count(*) FILTER (WHERE kind <> 'document_chunk') AS memories,
             count(*) FILTER (WHERE kind = 'document_chunk') AS chunks
        FROM memories WHERE org_id = o.id) m ON true
 ORDER BY o.created_at, o.name
