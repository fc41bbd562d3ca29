-- Erasure: remove the history of memories $2 and every event recorded under agent $3 (null: none by agent), with their consolidation jobs. Returns how many events went.
WITH jobs AS (
    DELETE FROM consolidation_jobs WHERE org_id = $1 AND memory_id = ANY($2::uuid[])
), gone AS (
    DELETE FROM memory_events
     WHERE org_id = $1 AND (memory_id = ANY($2::uuid[]) OR ($3::text IS NOT NULL AND agent_id = $3))
    RETURNING 1
)
SELECT count(*) FROM gone
