-- An org's API keys, oldest first: id, display prefix, label and timestamps — never the hash (owner role only).
SELECT id, prefix, name, created_at, last_used_at, revoked_at
  FROM api_keys
 WHERE org_id = $1
 ORDER BY created_at, id
