-- A memory before a change, row-locked until the transaction ends: whether it has expired (to a change it is gone, as after its purge), owner agent, kind and conversation (cache invalidation; document chunks and messages are read-only here), key and whether it is current (duplicate checks), event and valid time, and the fields a PATCH compares (one that changes nothing records nothing).
SELECT coalesce(expires_at <= now(), false) AS expired, agent_id, kind, conversation_id, key, superseded_by, occurred_at, valid_until,
       text, metadata, importance, pinned, expires_at, search_context
  FROM memories WHERE org_id = $1 AND id = $2 FOR UPDATE
