-- Retire memories $2 in favour of $3: superseded now (record time), valid until $4 (valid time; an earlier end they already had stays). Only live fact rows (not messages, not document chunks). Returns what was retired, with its agent.
UPDATE memories
   SET superseded_by = $3, superseded_at = now(),
       valid_until = CASE WHEN valid_until IS NOT NULL AND valid_until < $4::timestamptz THEN valid_until
                          ELSE $4::timestamptz END,
       updated_at = now()
 WHERE org_id = $1 AND id = ANY($2::uuid[])
RETURNING id, agent_id, valid_until
