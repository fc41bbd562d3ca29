-- A job whose model call or decision failed: again after $3 seconds, or 'failed' once it had $4 attempts (its memory stays as written).
UPDATE consolidation_jobs
   SET status = CASE WHEN attempts >= $4 THEN 'failed' ELSE 'pending' END,
       available_at = now() + make_interval(secs => $3::float8), lease_until = NULL, last_error = left($5, 1000),
       finished_at = CASE WHEN attempts >= $4 THEN now() END
 WHERE org_id = $1 AND id = $2 AND status = 'running' AND attempts = $6
