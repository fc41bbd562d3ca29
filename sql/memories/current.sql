-- A memory before a change, row-locked until the transaction ends: owner agent and kind (cache invalidation; document chunks are read-only here), key and whether it is current (duplicate checks), event and valid time.
SELECT agent_id, kind, key, superseded_by, occurred_at, valid_until FROM memories WHERE org_id = $1 AND id = $2 FOR UPDATE
