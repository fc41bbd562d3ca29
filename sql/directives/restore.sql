-- A directive from an export: kept as exported ($4 version, $5 created_at, $6 updated_at) for an agent without
-- one (and for one whose directive was deleted at an earlier version); other text replaces the agent's at its
-- next version, at least the exported one.
INSERT INTO directives AS d (org_id, agent_id, content, version, created_at, updated_at)
VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (org_id, agent_id) DO UPDATE
   SET content = EXCLUDED.content, version = greatest(d.version + 1, EXCLUDED.version),
       created_at = CASE WHEN d.content IS NULL THEN EXCLUDED.created_at ELSE d.created_at END,
       updated_at = CASE WHEN d.content IS NULL AND EXCLUDED.version > d.version THEN EXCLUDED.updated_at
                         ELSE now() END
RETURNING agent_id, content, version, updated_at
