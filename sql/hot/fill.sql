-- An agent's hot set: its own and org-wide live memories (not document chunks), pinned first, then by importance and recent use ($4 = access half-life in hours).
SELECT id, agent_id, kind, text, embedding, importance, usefulness, pinned, created_at, last_accessed_at, access_count
  FROM memories
 WHERE org_id = $1
   AND (agent_id = $2 OR agent_id IS NULL)
   AND source_path IS NULL
   AND (expires_at IS NULL OR expires_at > now())
 ORDER BY pinned DESC,
          0.6 * importance
          + 0.4 * coalesce(exp(greatest(-50.0, -ln(2.0) * extract(epoch FROM now() - last_accessed_at) / (3600.0 * $4::float8))), 0) DESC,
          created_at DESC, id DESC
 LIMIT $3
