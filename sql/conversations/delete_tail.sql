-- Delete conversation $2's messages after position $3 (its tail; the caller holds the conversation's lock and keeps the batch bounded); returns how many went.
WITH gone AS (
    DELETE FROM memories WHERE org_id = $1 AND conversation_id = $2 AND position > $3
    RETURNING 1
)
SELECT count(*) FROM gone
