-- Restore the access statistics of memories an import just wrote ($2 ids, $3 access counts, $4 last access times).
INSERT INTO memory_access (org_id, memory_id, access_count, last_accessed_at)
SELECT $1, t.id, t.n, t.at
  FROM unnest($2::uuid[], $3::integer[], $4::timestamptz[]) AS t(id, n, at)
ON CONFLICT (org_id, memory_id) DO NOTHING
