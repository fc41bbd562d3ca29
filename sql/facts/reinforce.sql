-- A merge: the kept memory $2 was written again ($3 its event time): count it, move last_seen_at, widen the event-time range,
-- add the duplicate's metadata keys it lacks ($4; its own values win), and keep it as long as the duplicate asked: its
-- valid time until the later end ($5 the duplicate's valid_until; none given, or an open one kept, leaves it), its row
-- until the later expiry ($6 the duplicate's expires_at; null, never, on either side makes it never). Returns the state
-- before, for the history and for undo, and the ends after.
WITH before AS (
    SELECT id, seen_count, last_seen_at, first_occurred_at, last_occurred_at, metadata, occurred_at, valid_until, expires_at
      FROM memories WHERE org_id = $1 AND id = $2 FOR UPDATE
)
UPDATE memories m
   SET seen_count = m.seen_count + 1,
       last_seen_at = now(),
       first_occurred_at = least(coalesce(m.first_occurred_at, m.occurred_at), $3::timestamptz),
       last_occurred_at = greatest(coalesce(m.last_occurred_at, m.occurred_at), $3::timestamptz),
       metadata = $4::jsonb || m.metadata,
       valid_until = CASE WHEN m.valid_until IS NULL OR $5::timestamptz IS NULL THEN m.valid_until
                          ELSE greatest(m.valid_until, $5::timestamptz) END,
       expires_at = CASE WHEN m.expires_at IS NULL OR $6::timestamptz IS NULL THEN NULL
                         ELSE greatest(m.expires_at, $6::timestamptz) END
  FROM before b
 WHERE m.org_id = $1 AND m.id = b.id
RETURNING b.seen_count, b.last_seen_at, b.first_occurred_at, b.last_occurred_at, b.metadata, m.agent_id,
          b.valid_until, b.expires_at, m.valid_until AS valid_until_after, m.expires_at AS expires_at_after
