-- Delete up to $3 of conversation $2's messages (a conversation is removed in batches, then its row); returns how many went.
WITH gone AS (
    DELETE FROM memories
     WHERE org_id = $1 AND id IN (
         SELECT id FROM memories WHERE org_id = $1 AND conversation_id = $2 LIMIT $3)
    RETURNING 1
)
SELECT count(*) FROM gone
