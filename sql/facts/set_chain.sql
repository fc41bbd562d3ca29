-- Re-link a retired memory $2 to a late arrival $3 that now follows it on its key's timeline: valid until $4, or the
-- earlier end it already had (as facts.retire keeps it). Returns the end it has now.
UPDATE memories
   SET superseded_by = $3,
       valid_until = CASE WHEN valid_until IS NOT NULL AND valid_until < $4::timestamptz THEN valid_until
                          ELSE $4::timestamptz END,
       updated_at = now()
 WHERE org_id = $1 AND id = $2
RETURNING valid_until
