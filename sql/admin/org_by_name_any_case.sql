-- The name of an org named $1 but for case (owner role only), or nothing: what a lookup that missed suggests, and what a new org's name may not repeat.
SELECT name FROM orgs WHERE lower(name) = lower($1) ORDER BY name LIMIT 1
