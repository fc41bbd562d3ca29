-- The first of an import's memory lines ($2, in order) that would collide with a memory the org holds under another id: at the same position or with the same message_id in a conversation, or as a second current memory of a key in one agent scope. A line whose id the org holds is left out (it is not written). Run with the lines' conversations and key scopes locked (export.import_conversations, facts.lock_scopes). Returns the line's place in $2 (1-based), the field that collides and the memory holding it; no row: none collides.
WITH input AS (
    SELECT t.n, r.id, r.agent_id, r.key, r.superseded_by, r.conversation_id, r.position, r.message_id
      FROM unnest($2::jsonb[]) WITH ORDINALITY AS t(line, n), jsonb_populate_record(NULL::memories, t.line) AS r
     WHERE NOT EXISTS (SELECT 1 FROM memories e WHERE e.org_id = $1 AND e.id = r.id)
), collisions AS (
    SELECT i.n, 'position' AS field, m.id
      FROM input i
      JOIN memories m ON m.org_id = $1 AND m.conversation_id IS NOT NULL AND m.conversation_id = i.conversation_id
                     AND m.position = i.position
    UNION ALL
    SELECT i.n, 'message_id', m.id
      FROM input i
      JOIN memories m ON m.org_id = $1 AND m.message_id IS NOT NULL AND m.conversation_id = i.conversation_id
                     AND m.message_id = i.message_id
    UNION ALL
    SELECT i.n, 'key', m.id
      FROM input i
      JOIN memories m ON m.org_id = $1 AND m.key IS NOT NULL AND m.superseded_by IS NULL AND m.key = i.key
                     AND (m.agent_id = i.agent_id OR (m.agent_id IS NULL AND i.agent_id IS NULL))
     WHERE i.superseded_by IS NULL
)
SELECT n, field, id FROM collisions ORDER BY n, field LIMIT 1
