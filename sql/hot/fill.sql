-- An agent's hot set: its own and org-wide live memories (not document chunks), pinned first, then by importance and recent use ($4 = access half-life in hours).
-- agent_exists: whether the agent has live memories of its own (the caller caches only such agents' sets).
-- Ranked on narrow columns only (index-only scans of memories_hot_candidates, one per side of the OR, plus memory_access), then only the winners' wide rows (text, embedding) are read.
WITH candidates AS (
    SELECT id, pinned, importance, created_at, true AS own
      FROM memories
     WHERE org_id = $1 AND agent_id = $2 AND source_path IS NULL AND (expires_at IS NULL OR expires_at > now())
    UNION ALL
    SELECT id, pinned, importance, created_at, false AS own
      FROM memories
     WHERE org_id = $1 AND agent_id IS NULL AND source_path IS NULL AND (expires_at IS NULL OR expires_at > now())
), ranked AS (
    SELECT c.id, c.pinned, c.created_at, a.access_count, a.last_accessed_at, bool_or(c.own) OVER () AS agent_exists,
           0.6 * c.importance
           + 0.4 * coalesce(exp(greatest(-50.0, -ln(2.0) * extract(epoch FROM now() - a.last_accessed_at)
                                                / (3600.0 * $4::float8))), 0) AS score
      FROM candidates c
      LEFT JOIN memory_access a ON a.org_id = $1 AND a.memory_id = c.id
     ORDER BY c.pinned DESC, score DESC, c.created_at DESC, c.id DESC
     LIMIT $3
)
SELECT m.id, m.agent_id, m.kind, m.text, m.embedding, m.importance, m.usefulness, m.pinned, m.created_at,
       m.occurred_at, r.last_accessed_at, coalesce(r.access_count, 0) AS access_count, r.agent_exists
  FROM ranked r
  JOIN memories m ON m.org_id = $1 AND m.id = r.id
 ORDER BY r.pinned DESC, r.score DESC, r.created_at DESC, r.id DESC
