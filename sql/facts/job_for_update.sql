-- A claimed job, locked for its decision to be applied: still this claim's (running, attempt $3)? Otherwise another worker took it over or it is done.
SELECT status, attempts FROM consolidation_jobs WHERE org_id = $1 AND id = $2 AND status = 'running' AND attempts = $3
FOR UPDATE
