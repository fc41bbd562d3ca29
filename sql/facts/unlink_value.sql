-- A keyed value $2 leaves its key's timeline in scope $6 (null: org-wide) for key $5: deleted, or moved to another agent.
-- The value it retired there (superseded_by $2; the newest, should there be more) is followed by what followed $2 ($3;
-- null: nothing, so it is current again), valid until that one's start where its end was $2's start $4 (an earlier end
-- of its own stays); when what followed $2 has expired (or was purged), until $2's own end $7, as after the purge.
-- Returns it.
WITH prev AS (
    SELECT id FROM memories
     WHERE org_id = $1 AND superseded_by = $2 AND key = $5 AND (agent_id = $6 OR ($6::text IS NULL AND agent_id IS NULL))
     ORDER BY occurred_at DESC, id DESC
     LIMIT 1
)
UPDATE memories
   SET superseded_by = $3::uuid,
       superseded_at = CASE WHEN $3::uuid IS NULL THEN NULL ELSE superseded_at END,
       valid_until = CASE WHEN valid_until = $4::timestamptz AND $3::uuid IS NOT NULL
                          THEN coalesce((SELECT n.occurred_at FROM memories n
                                          WHERE n.org_id = $1 AND n.id = $3::uuid
                                            AND (n.expires_at IS NULL OR n.expires_at > now())),
                                        $7::timestamptz)
                          WHEN valid_until = $4::timestamptz THEN NULL
                          ELSE valid_until END,
       updated_at = now()
 WHERE org_id = $1 AND id IN (SELECT id FROM prev)
RETURNING id, agent_id, superseded_by, valid_until
