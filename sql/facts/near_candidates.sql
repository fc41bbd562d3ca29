-- Near-duplicate candidates: for each new text (row $2..$5: agent scope, embedding, kind, key), its $6 nearest current, live memories of the same org, scope, kind and key by cosine (HNSW; the caller sets the iterative scan), excluding ids $7 (a PATCHed memory itself).
SELECT q.ord::int AS ord, c.id, c.text, c.cosine
  FROM unnest($2::text[], $3::vector[], $4::text[], $5::text[]) WITH ORDINALITY AS q(agent_id, embedding, kind, key, ord)
 CROSS JOIN LATERAL (
     SELECT m.id, m.text, 1 - (m.embedding <=> q.embedding) AS cosine
       FROM memories m
      WHERE m.org_id = $1 AND m.agent_id IS NOT DISTINCT FROM q.agent_id AND m.kind = q.kind
        AND m.key IS NOT DISTINCT FROM q.key AND m.superseded_by IS NULL AND m.embedding IS NOT NULL
        AND (m.expires_at IS NULL OR m.expires_at > now()) AND m.id <> ALL($7::uuid[])
      ORDER BY m.embedding <=> q.embedding
      LIMIT $6) AS c
