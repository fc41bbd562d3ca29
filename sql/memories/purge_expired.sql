-- Remove a bounded number of expired memories of the org (called opportunistically on writes). SKIP LOCKED: purges running at once (several writers, several service instances) take disjoint rows, so they never wait on or deadlock with each other.
-- Storage cleanup only, changing no answer: an expired memory is gone to every read already, and an expired value of a key is forgotten, not undone (the value it retired keeps its end and superseded_by), so no other row changes.
DELETE FROM memories
 WHERE org_id = $1 AND id IN (
     SELECT id FROM memories WHERE org_id = $1 AND expires_at <= now() LIMIT $2 FOR UPDATE SKIP LOCKED)
