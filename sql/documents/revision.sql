-- The org's document index revision and last indexed time (no row yet: revision 0).
SELECT coalesce(max(revision), 0)::bigint AS revision, max(last_indexed_at) AS last_indexed_at
  FROM document_index_state
 WHERE org_id = $1
