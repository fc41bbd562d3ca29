-- A late value for key $3 in scope $2 at event time $4: the memory just before it (valid from at or before $4) and the one just after, on the key's timeline (memories_key_timeline), locked.
WITH before AS (
    SELECT 'before' AS side, id, occurred_at FROM memories
     WHERE org_id = $1 AND (agent_id = $2 OR ($2::text IS NULL AND agent_id IS NULL)) AND key = $3 AND occurred_at <= $4
     ORDER BY occurred_at DESC, id DESC LIMIT 1 FOR UPDATE
), after AS (
    SELECT 'after' AS side, id, occurred_at FROM memories
     WHERE org_id = $1 AND (agent_id = $2 OR ($2::text IS NULL AND agent_id IS NULL)) AND key = $3 AND occurred_at > $4
     ORDER BY occurred_at, id LIMIT 1 FOR UPDATE
)
SELECT * FROM before UNION ALL SELECT * FROM after
