-- The org's consolidation jobs for memories $2 (status, attempts, decision): what the model decided about them.
SELECT id, memory_id, status, attempts, decision, last_error, created_at, finished_at FROM consolidation_jobs
 WHERE org_id = $1 AND memory_id = ANY($2::uuid[])
 ORDER BY id
