-- Remove a bounded number of expired memories of the org (called opportunistically on writes).
DELETE FROM memories
 WHERE org_id = $1 AND id IN (
     SELECT id FROM memories WHERE org_id = $1 AND expires_at <= now() LIMIT $2)
