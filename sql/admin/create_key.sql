-- Store a new API key's hash (never the key) for an org; returns the key id.
INSERT INTO api_keys (org_id, key_hash, prefix, name) VALUES ($1, $2, $3, $4) RETURNING id
