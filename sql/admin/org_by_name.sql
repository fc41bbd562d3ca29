-- Look an org up by its unique name (owner role only).
SELECT id FROM orgs WHERE name = $1
