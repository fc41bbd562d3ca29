-- Append history events (parallel arrays: memory, agent, event, related memory, undone event, detail); returns their ids in input order.
INSERT INTO memory_events (org_id, memory_id, agent_id, event, related_id, undoes, detail)
SELECT $1, e.memory_id, e.agent_id, e.event, e.related_id, e.undoes, e.detail
  FROM unnest($2::uuid[], $3::text[], $4::text[], $5::uuid[], $6::uuid[], $7::jsonb[])
       WITH ORDINALITY AS e(memory_id, agent_id, event, related_id, undoes, detail, ord)
 ORDER BY e.ord
RETURNING id
