-- Queue memories $2 for model consolidation with their candidates $3 (one job per memory: a repeat is a no-op). Committed with the write, decided after it.
INSERT INTO consolidation_jobs (org_id, memory_id, candidates)
SELECT $1, j.memory_id, j.candidates FROM unnest($2::uuid[], $3::jsonb[]) AS j(memory_id, candidates)
ON CONFLICT (org_id, memory_id) DO NOTHING
