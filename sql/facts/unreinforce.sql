-- Undo a merge into $2: one sighting fewer (back to its own: no reinforcement fields when none is left; with other merges left, the event-time range keeps their extent), and the metadata keys the merge added ($3: key -> value) removed where they still hold that value.
-- $4: the ends the merge moved ({"valid_until" | "expires_at": [before, after]}; an event recorded without it moved none): each goes back where it still holds the merge's value.
UPDATE memories m
   SET seen_count = greatest(1, m.seen_count - 1),
       last_seen_at = CASE WHEN m.seen_count <= 2 THEN NULL ELSE m.last_seen_at END,
       first_occurred_at = CASE WHEN m.seen_count <= 2 THEN NULL ELSE m.first_occurred_at END,
       last_occurred_at = CASE WHEN m.seen_count <= 2 THEN NULL ELSE m.last_occurred_at END,
       metadata = m.metadata - ARRAY(SELECT e.k FROM jsonb_each($3::jsonb) AS e(k, v) WHERE m.metadata -> e.k = e.v),
       valid_until = CASE WHEN $4::jsonb ? 'valid_until'
                               AND m.valid_until IS NOT DISTINCT FROM ($4::jsonb -> 'valid_until' ->> 1)::timestamptz
                          THEN ($4::jsonb -> 'valid_until' ->> 0)::timestamptz ELSE m.valid_until END,
       expires_at = CASE WHEN $4::jsonb ? 'expires_at'
                              AND m.expires_at IS NOT DISTINCT FROM ($4::jsonb -> 'expires_at' ->> 1)::timestamptz
                         THEN ($4::jsonb -> 'expires_at' ->> 0)::timestamptz ELSE m.expires_at END,
       updated_at = now()
 WHERE m.org_id = $1 AND m.id = $2
RETURNING m.agent_id
