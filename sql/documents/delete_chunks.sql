-- Delete the chunks of some paths of a collection; returns how many rows went.
WITH gone AS (
    DELETE FROM memories
     WHERE org_id = $1 AND kind = 'document_chunk'
       AND source_path = ANY($3::text[])
       AND metadata->>'collection' = $2
    RETURNING 1
)
SELECT count(*)::bigint FROM gone
