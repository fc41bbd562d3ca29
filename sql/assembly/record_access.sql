-- Batched access statistics of memories packed into contexts (memory_access, a narrow table so these writes stay cheap): add the counts, move last_accessed_at forward (never back). Ids of memories deleted meanwhile are skipped.
INSERT INTO memory_access AS a (org_id, memory_id, access_count, last_accessed_at)
SELECT $1, u.id, u.n, u.at
  FROM unnest($2::uuid[], $3::int[], $4::timestamptz[]) AS u(id, n, at)
 WHERE EXISTS (SELECT 1 FROM memories m WHERE m.org_id = $1 AND m.id = u.id)
ON CONFLICT (org_id, memory_id) DO UPDATE
   SET access_count = a.access_count + excluded.access_count,
       last_accessed_at = greatest(a.last_accessed_at, excluded.last_accessed_at)
