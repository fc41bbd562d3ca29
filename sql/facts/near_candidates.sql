-- Near-duplicate candidates in one scope (agent $3, NULL for org-wide; kind $4; key $5, NULL for none): for each
-- new text's embedding in $2, its $6 nearest current (not superseded, valid time not ended), live memories by cosine,
-- excluding ids $7 (a PATCHed memory itself). One scope per call, so that under the pool's custom plans the scope is
-- constants the planner can use: an index scan of a small scope and a sort, or the HNSW walk (the caller sets the
-- iterative scan) for a big one.
-- A scope compared per row (IS NOT DISTINCT FROM a joined value) is a scan of every row of the org per item.
SELECT q.ord::int AS ord, c.id, c.text, c.cosine
  FROM unnest($2::vector[]) WITH ORDINALITY AS q(embedding, ord)
 CROSS JOIN LATERAL (
     SELECT m.id, m.text, 1 - (m.embedding <=> q.embedding) AS cosine
       FROM memories m
      WHERE m.org_id = $1 AND (m.agent_id = $3 OR ($3::text IS NULL AND m.agent_id IS NULL)) AND m.kind = $4
        AND (m.key = $5 OR ($5::text IS NULL AND m.key IS NULL)) AND m.superseded_by IS NULL
        AND (m.valid_until IS NULL OR m.valid_until > now()) AND m.embedding IS NOT NULL
        AND (m.expires_at IS NULL OR m.expires_at > now()) AND m.id <> ALL($7::uuid[])
      ORDER BY m.embedding <=> q.embedding
      LIMIT $6) AS c
