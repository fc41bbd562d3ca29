-- Before an import writes messages: create the conversations of $2 (their export lines, which agree on each conversation's agent), or lock the ones the org holds, in id order (a concurrent append or import waits here, as appends do on conversations.open): a conversation counts up to its last imported position, and keeps its earliest creation and latest append time. Returns each conversation's owner (one the org held keeps its own: the caller compares).
INSERT INTO conversations AS c (org_id, id, agent_id, message_count, created_at, updated_at)
SELECT $1, r.conversation_id, (array_agg(r.agent_id))[1], max(r.position), min(coalesce(r.created_at, now())),
       max(coalesce(r.created_at, now()))
  FROM unnest($2::jsonb[]) AS t(line), jsonb_populate_record(NULL::memories, t.line) AS r
 WHERE r.conversation_id IS NOT NULL
 GROUP BY r.conversation_id
 ORDER BY r.conversation_id
ON CONFLICT (org_id, id) DO UPDATE
   SET message_count = greatest(c.message_count, EXCLUDED.message_count),
       updated_at = greatest(c.updated_at, EXCLUDED.updated_at)
RETURNING c.id, c.agent_id
