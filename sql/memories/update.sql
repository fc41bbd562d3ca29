-- Partial update: each field has a "set it" flag so a field can be set to NULL or left alone; returns the row with its access statistics.
-- $22: the new text's normalized hash (with $3; null for messages); $23/$24: valid_until.
WITH updated AS (
    UPDATE memories SET
        text        = CASE WHEN $3  THEN $4  ELSE text END,
        embedding   = CASE WHEN $3  THEN $5::vector ELSE embedding END,
        text_hash   = CASE WHEN $3  THEN $22::bytea ELSE text_hash END,
        agent_id    = CASE WHEN $6  THEN $7  ELSE agent_id END,
        kind        = CASE WHEN $8  THEN $9  ELSE kind END,
        metadata    = CASE WHEN $10 THEN $11::jsonb ELSE metadata END,
        importance  = CASE WHEN $12 THEN $13::real ELSE importance END,
        pinned      = CASE WHEN $14 THEN $15 ELSE pinned END,
        expires_at  = CASE WHEN $16 THEN $17::timestamptz ELSE expires_at END,
        occurred_at = CASE WHEN $18 THEN $19::timestamptz ELSE occurred_at END,
        search_context = CASE WHEN $20 THEN $21::text ELSE search_context END,
        valid_until = CASE WHEN $23 THEN $24::timestamptz ELSE valid_until END,
        updated_at  = now()
     WHERE org_id = $1 AND id = $2 AND (expires_at IS NULL OR expires_at > now())
    RETURNING *
)
SELECT u.*, coalesce(a.access_count, 0) AS access_count, a.last_accessed_at
  FROM updated u
  LEFT JOIN memory_access a ON a.org_id = u.org_id AND a.memory_id = u.id
