-- After export.import_conversations (the rows are locked): conversations $2 the org held before their conversation lines ($3 the lines' creation times) keep the earlier creation time, so a conversation whose messages were imported before its line gets its exported one.
UPDATE conversations c
   SET created_at = t.created_at
  FROM unnest($2::text[], $3::timestamptz[]) AS t(id, created_at)
 WHERE c.org_id = $1 AND c.id = t.id AND t.created_at < c.created_at
