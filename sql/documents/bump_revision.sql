-- Increment the org's document index revision (creating the row at 1); run last in a writing transaction.
INSERT INTO document_index_state AS s (org_id, revision, last_indexed_at)
VALUES ($1, 1, now())
ON CONFLICT (org_id) DO UPDATE SET revision = s.revision + 1, last_indexed_at = now()
RETURNING revision, last_indexed_at
