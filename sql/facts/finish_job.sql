-- A job decided: done, with the model's decision.
UPDATE consolidation_jobs SET status = 'done', decision = $3::jsonb, finished_at = now(), lease_until = NULL, last_error = NULL
 WHERE org_id = $1 AND id = $2
