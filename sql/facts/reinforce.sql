-- A merge: the kept memory $2 was written again ($3 its event time): count it, move last_seen_at, widen the event-time range, and add the duplicate's metadata keys it lacks ($4; its own values win). Returns the state before, for the history and for undo.
WITH before AS (
    SELECT id, seen_count, last_seen_at, first_occurred_at, last_occurred_at, metadata, occurred_at
      FROM memories WHERE org_id = $1 AND id = $2 FOR UPDATE
)
UPDATE memories m
   SET seen_count = m.seen_count + 1,
       last_seen_at = now(),
       first_occurred_at = least(coalesce(m.first_occurred_at, m.occurred_at), $3::timestamptz),
       last_occurred_at = greatest(coalesce(m.last_occurred_at, m.occurred_at), $3::timestamptz),
       metadata = $4::jsonb || m.metadata
  FROM before b
 WHERE m.org_id = $1 AND m.id = b.id
RETURNING b.seen_count, b.last_seen_at, b.first_occurred_at, b.last_occurred_at, b.metadata, m.agent_id
