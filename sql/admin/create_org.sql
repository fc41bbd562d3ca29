-- Create an org (owner role only) unless one of the same name but for case exists; returns its id, or nothing when such an org exists.
INSERT INTO orgs (name) SELECT $1 WHERE NOT EXISTS (SELECT 1 FROM orgs WHERE lower(name) = lower($1)) RETURNING id
