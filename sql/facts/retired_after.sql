-- The newest memory that $2 retired (superseded_by $2; found through its `superseded` event, memory_events_related) and
-- that happened after $3: a PATCH moving $2's occurred_at to $3 would order it before a memory it superseded.
SELECT m.id, m.occurred_at
  FROM memory_events e
  JOIN memories m ON m.org_id = e.org_id AND m.id = e.memory_id
 WHERE e.org_id = $1 AND e.related_id = $2 AND e.event = 'superseded' AND m.superseded_by = $2 AND m.occurred_at > $3
 ORDER BY m.occurred_at DESC, m.id
 LIMIT 1
