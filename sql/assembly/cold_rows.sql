-- Scoring fields of cold search hits ($2, best first), kept in that order: the agent's own memories and, when $4, org-wide ones; at most $5.
SELECT m.id, m.agent_id, m.text, m.embedding, m.importance, m.usefulness, m.pinned, m.created_at, a.last_accessed_at
  FROM unnest($2::uuid[]) WITH ORDINALITY AS h(id, ord)
  JOIN memories m ON m.org_id = $1 AND m.id = h.id
  LEFT JOIN memory_access a ON a.org_id = m.org_id AND a.memory_id = m.id
 WHERE (m.agent_id = $3 OR ($4::bool AND m.agent_id IS NULL))
   AND (m.expires_at IS NULL OR m.expires_at > now())
 ORDER BY h.ord
 LIMIT $5
