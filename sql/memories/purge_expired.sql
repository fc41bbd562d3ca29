-- Remove a bounded number of expired memories of the org (called opportunistically on writes). SKIP LOCKED: purges running at once (several writers, several service instances) take disjoint rows, so they never wait on or deadlock with each other.
DELETE FROM memories
 WHERE org_id = $1 AND id IN (
     SELECT id FROM memories WHERE org_id = $1 AND expires_at <= now() LIMIT $2 FOR UPDATE SKIP LOCKED)
