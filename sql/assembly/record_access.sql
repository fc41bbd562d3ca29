-- Batched access statistics of memories packed into contexts: add the counts, move last_accessed_at forward (never back); updated_at is untouched.
UPDATE memories m
   SET access_count = m.access_count + u.n,
       last_accessed_at = greatest(coalesce(m.last_accessed_at, u.at), u.at)
  FROM unnest($2::uuid[], $3::int[], $4::timestamptz[]) AS u(id, n, at)
 WHERE m.org_id = $1 AND m.id = u.id
