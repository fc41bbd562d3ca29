-- An agent's directive; a deleted one's row holds no content, and its version (what a cache entry saying
-- "none" is stamped with, so that a late read of the deleted text loses to it).
SELECT agent_id, content, version, updated_at FROM directives WHERE org_id = $1 AND agent_id = $2
