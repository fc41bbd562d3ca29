-- Active keys with display prefix $1 in any org, with the org's name (owner role only): `keys revoke PREFIX` revokes only when one matches.
SELECT k.id, o.name AS org_name
  FROM api_keys k
  JOIN orgs o ON o.id = k.org_id
 WHERE k.prefix = $1 AND k.revoked_at IS NULL
 ORDER BY k.created_at, k.id
