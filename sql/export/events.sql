-- The history recorded under the agent (memory_events), oldest first, one NDJSON line each: what changed, merged, superseded or was undone.
SELECT (jsonb_build_object('type', 'event') || to_jsonb(e))::text AS line
  FROM memory_events e
 WHERE e.org_id = $1 AND e.agent_id = $2
 ORDER BY e.id
