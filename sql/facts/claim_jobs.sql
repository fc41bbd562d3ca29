-- Claim up to $2 due consolidation jobs of the org (pending, or running with an expired lease): FOR UPDATE SKIP LOCKED, so workers of every instance take disjoint jobs; each claim counts an attempt and holds a lease of $3 seconds.
UPDATE consolidation_jobs j
   SET status = 'running', attempts = j.attempts + 1, lease_until = now() + make_interval(secs => $3::float8)
 WHERE j.org_id = $1 AND j.id IN (
     SELECT id FROM consolidation_jobs
      WHERE org_id = $1 AND status IN ('pending', 'running') AND available_at <= now()
        AND (lease_until IS NULL OR lease_until < now())
      ORDER BY available_at, id
      LIMIT $2
      FOR UPDATE SKIP LOCKED)
RETURNING j.id, j.memory_id, j.candidates, j.attempts
