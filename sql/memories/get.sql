-- One live (unexpired) memory by id, with its access statistics (memory_access; none yet: 0 / null).
SELECT m.*, coalesce(a.access_count, 0) AS access_count, a.last_accessed_at
  FROM memories m
  LEFT JOIN memory_access a ON a.org_id = m.org_id AND a.memory_id = m.id
 WHERE m.org_id = $1 AND m.id = $2 AND (m.expires_at IS NULL OR m.expires_at > now())
