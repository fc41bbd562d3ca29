-- Re-link a retired memory $2 to a late arrival $3 that now follows it on its key's timeline: valid until $4.
UPDATE memories SET superseded_by = $3, valid_until = $4::timestamptz, updated_at = now()
 WHERE org_id = $1 AND id = $2
