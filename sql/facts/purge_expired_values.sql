-- The expired values of key $3 in agent scope $2 (null: org-wide) go before a change reads or writes the key's timeline
-- (facts.key_current, facts.key_neighbours): the purge of memories.purge_expired, done now, so the change finds the key as
-- it would after that purge (an expired value is forgotten: the values around it keep their ends). The caller holds the
-- scope's lock (facts.lock_scopes); a row the service's purge has locked meanwhile is waited for (that purge waits on none).
DELETE FROM memories
 WHERE org_id = $1 AND (agent_id = $2 OR ($2::text IS NULL AND agent_id IS NULL)) AND key = $3 AND expires_at <= now()
