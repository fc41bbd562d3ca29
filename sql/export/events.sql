-- (A null agent ($2): the whole org, agents and org-wide rows.) The history recorded under the agent (memory_events), oldest first, one NDJSON line each: what changed, merged, superseded or was undone.
SELECT (jsonb_build_object('type', 'event') || to_jsonb(e))::text AS line
  FROM memory_events e
 WHERE e.org_id = $1 AND ($2::text IS NULL OR e.agent_id = $2)
 ORDER BY e.id
