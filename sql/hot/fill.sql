-- An agent's hot set: its own and org-wide live memories (not document chunks, not conversations' messages), pinned first, then by importance and recent use ($4 = access half-life in hours).
-- agent_exists: whether the agent has live memories of its own (the caller caches only such agents' sets): one
-- probe of memories_hot_candidates, evaluated once (a window bool_or over the candidates made the fill 20% slower).
-- The decay in float8: extract() returns numeric, and numeric exp() per candidate was two thirds of a fill
-- (15,000 candidates: 36 -> 12 ms).
-- Current memories only (not superseded, valid time not ended: memories_hot_candidates covers both, migration 0013);
-- ends_at (the expiry or the end of the valid time, the earlier) lets a cached set drop what ends while it is cached.
-- Ranked on narrow columns only (index-only scans of memories_hot_candidates, one per side of the OR, plus memory_access), then only the winners' wide rows (text, embedding) are read.
WITH candidates AS (
    SELECT id, pinned, importance, created_at
      FROM memories
     WHERE org_id = $1 AND agent_id = $2 AND source_path IS NULL AND conversation_id IS NULL AND (expires_at IS NULL OR expires_at > now())
       AND superseded_by IS NULL AND (valid_until IS NULL OR valid_until > now())
    UNION ALL
    SELECT id, pinned, importance, created_at
      FROM memories
     WHERE org_id = $1 AND agent_id IS NULL AND source_path IS NULL AND conversation_id IS NULL AND (expires_at IS NULL OR expires_at > now())
       AND superseded_by IS NULL AND (valid_until IS NULL OR valid_until > now())
), ranked AS (
    SELECT c.id, c.pinned, c.created_at, a.access_count, a.last_accessed_at,
           0.6 * c.importance
           + 0.4 * coalesce(exp(greatest(-50.0::float8, -ln(2.0::float8)
                                                * extract(epoch FROM now() - a.last_accessed_at)::float8
                                                / (3600.0 * $4::float8))), 0) AS score
      FROM candidates c
      LEFT JOIN memory_access a ON a.org_id = $1 AND a.memory_id = c.id
     ORDER BY c.pinned DESC, score DESC, c.created_at DESC, c.id DESC
     LIMIT $3
)
SELECT m.id, m.agent_id, m.kind, m.text, m.embedding, m.importance, m.usefulness, m.pinned, m.created_at,
       m.occurred_at, least(m.expires_at, m.valid_until) AS ends_at, r.last_accessed_at, coalesce(r.access_count, 0) AS access_count,
       EXISTS (SELECT 1 FROM memories o
                WHERE o.org_id = $1 AND o.agent_id = $2 AND o.source_path IS NULL AND conversation_id IS NULL
                  AND (o.expires_at IS NULL OR o.expires_at > now())) AS agent_exists
  FROM ranked r
  JOIN memories m ON m.org_id = $1 AND m.id = r.id
 ORDER BY r.pinned DESC, r.score DESC, r.created_at DESC, r.id DESC
