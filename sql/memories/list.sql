-- A page of live memories, newest first, keyset-paginated on (created_at, id); filters are optional.
SELECT * FROM memories
 WHERE org_id = $1
   AND (expires_at IS NULL OR expires_at > now())
   AND ($2::text IS NULL OR agent_id = $2)
   AND ($3::text IS NULL OR kind = $3)
   AND ($4::jsonb IS NULL OR metadata @> $4)
   AND ($5::timestamptz IS NULL OR created_at >= $5)
   AND ($6::timestamptz IS NULL OR created_at < $6)
   AND ($7::timestamptz IS NULL OR (created_at, id) < ($7, $8::uuid))
 ORDER BY created_at DESC, id DESC
 LIMIT $9
