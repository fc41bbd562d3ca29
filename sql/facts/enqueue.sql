-- Queue memories $2 for model consolidation with their candidates $3 (JSON arrays as text: an array of arrays would be read as a two-dimensional array). One job per memory: a repeat is a no-op. Committed with the write, decided after it.
INSERT INTO consolidation_jobs (org_id, memory_id, candidates)
SELECT $1, j.memory_id, j.candidates::jsonb FROM unnest($2::uuid[], $3::text[]) AS j(memory_id, candidates)
ON CONFLICT (org_id, memory_id) DO NOTHING
