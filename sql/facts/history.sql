-- A page of one memory's history, oldest first, keyset-paginated on the event id (UUIDv7: the order they were recorded); $4: the page size.
SELECT e.id, e.memory_id, e.agent_id, e.event, e.at, e.related_id, e.undoes, e.detail,
       (SELECT u.id FROM memory_events u WHERE u.org_id = e.org_id AND u.undoes = e.id) AS undone_by
  FROM memory_events e
 WHERE e.org_id = $1 AND e.memory_id = $2 AND ($3::uuid IS NULL OR e.id > $3)
 ORDER BY e.id
 LIMIT $4
