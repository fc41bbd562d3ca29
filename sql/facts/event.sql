-- One history event of memory $2 by id $3, and whether it was undone already (undone_by). An undo reads it again under the scope locks (facts.lock_scopes), which serialize undos of one event.
SELECT e.id, e.memory_id, e.agent_id, e.event, e.at, e.related_id, e.detail,
       (SELECT u.id FROM memory_events u WHERE u.org_id = e.org_id AND u.undoes = e.id) AS undone_by
  FROM memory_events e
 WHERE e.org_id = $1 AND e.memory_id = $2 AND e.id = $3
