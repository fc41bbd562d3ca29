-- Before an import writes messages: create the conversations of $3 (conversation lines) and of $2 (message lines; not those whose id the org holds: they are not written), which agree on each conversation's agent, or lock the ones the org holds, in id order in one statement (a concurrent append or import waits here, as appends do on conversations.open). A conversation counts up to its last imported position (0 for one of no message: its messages raise it as they arrive) and keeps its earliest creation and latest change: a new one takes its line's times (else its messages'). Returns each conversation's owner (one the org held keeps its own: the caller compares) and whether this statement created it.
WITH input AS (
    SELECT r.id, r.agent_id, 0::bigint AS message_count, coalesce(r.created_at, now()) AS created_at,
           coalesce(r.updated_at, r.created_at, now()) AS updated_at
      FROM unnest($3::jsonb[]) AS t(line), jsonb_populate_record(NULL::conversations, t.line) AS r
    UNION ALL
    SELECT r.conversation_id, r.agent_id, r.position, coalesce(r.created_at, now()), coalesce(r.created_at, now())
      FROM unnest($2::jsonb[]) AS t(line), jsonb_populate_record(NULL::memories, t.line) AS r
     WHERE r.conversation_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM memories e WHERE e.org_id = $1 AND e.id = r.id)
)
INSERT INTO conversations AS c (org_id, id, agent_id, message_count, created_at, updated_at)
SELECT $1, id, (array_agg(agent_id))[1], max(message_count), min(created_at), max(updated_at)
  FROM input
 GROUP BY id
 ORDER BY id
ON CONFLICT (org_id, id) DO UPDATE
   SET message_count = greatest(c.message_count, EXCLUDED.message_count),
       updated_at = greatest(c.updated_at, EXCLUDED.updated_at)
RETURNING c.id, c.agent_id, (c.xmax = 0) AS created
