-- Undo a supersession: memory $2 is current again (its valid time open, or $3 when it had its own end). Fails on memories_current_key if its key has a current memory meanwhile.
UPDATE memories
   SET superseded_by = NULL, superseded_at = NULL, valid_until = $3::timestamptz, updated_at = now()
 WHERE org_id = $1 AND id = $2
RETURNING id, agent_id
