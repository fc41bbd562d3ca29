-- Create an org (owner role only); returns its id.
INSERT INTO orgs (name) VALUES ($1) RETURNING id
