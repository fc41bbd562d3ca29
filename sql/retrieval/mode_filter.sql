-- Modes search: which lookup hits $2 are live rows passing the request's filters (the branches' filter arguments, same semantics: $3-$11, then sources and collections $12-$13, then $14/$15 the currency ones), with the fields results carry.
SELECT m.id, m.agent_id, m.metadata, m.occurred_at, m.superseded_by, m.valid_until
  FROM memories m
 WHERE m.org_id = $1
   AND m.id = ANY($2::uuid[])
   AND (m.expires_at IS NULL OR m.expires_at > now())
   AND ($3::text IS NULL OR m.agent_id = $3)
   AND ($4::text[] IS NULL OR m.kind = ANY($4))
   AND ($5::jsonb IS NULL OR m.metadata @> $5)
   AND ($6::timestamptz IS NULL OR m.created_at >= $6)
   AND ($7::timestamptz IS NULL OR m.created_at < $7)
   AND ($8::text IS NULL OR m.source_path LIKE $8)
   AND ($9::smallint[] IS NULL OR m.level = ANY($9))
   AND ($10::timestamptz IS NULL OR m.occurred_at >= $10)
   AND ($11::timestamptz IS NULL OR m.occurred_at < $11)
   AND ($12::text[] IS NULL OR (CASE m.kind WHEN 'document_chunk' THEN 'documents' WHEN 'message' THEN 'messages'
                                ELSE 'memories' END) = ANY($12))
   AND ($13::text[] IS NULL OR m.kind <> 'document_chunk' OR m.metadata->>'collection' = ANY($13))
   AND CASE WHEN $14::timestamptz IS NOT NULL THEN m.occurred_at <= $14 AND (m.valid_until IS NULL OR m.valid_until > $14)
       WHEN $15::bool THEN true
       ELSE m.superseded_by IS NULL AND (m.valid_until IS NULL OR m.valid_until > now()) END
