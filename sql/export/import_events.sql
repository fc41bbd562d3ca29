-- Restore exported history events (POST /v1/import): $2 their export lines (jsonb, read with the table's own types); an event the org already holds (its id, or an undo of the same event) is left as it is. Returns the ids written.
INSERT INTO memory_events (org_id, id, memory_id, agent_id, event, at, related_id, undoes, detail)
SELECT $1, r.id, r.memory_id, r.agent_id, r.event, r.at, r.related_id, r.undoes, coalesce(r.detail, '{}'::jsonb)
  FROM unnest($2::jsonb[]) AS t(line), jsonb_populate_record(NULL::memory_events, t.line) AS r
ON CONFLICT DO NOTHING
RETURNING id
