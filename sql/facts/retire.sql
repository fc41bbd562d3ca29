-- Retire memories $2 in favour of $3: superseded now (record time), valid until $4 (valid time; an earlier end they already had stays). Only live fact rows (not messages, not document chunks). Returns what was retired, with its agent and its end before (what an undo gives back).
WITH before AS (
    SELECT id, valid_until FROM memories WHERE org_id = $1 AND id = ANY($2::uuid[]) FOR UPDATE
)
UPDATE memories m
   SET superseded_by = $3, superseded_at = now(),
       valid_until = CASE WHEN m.valid_until IS NOT NULL AND m.valid_until < $4::timestamptz THEN m.valid_until
                          ELSE $4::timestamptz END,
       updated_at = now()
  FROM before b
 WHERE m.org_id = $1 AND m.id = b.id
RETURNING m.id, m.agent_id, m.valid_until, b.valid_until AS previous_valid_until
