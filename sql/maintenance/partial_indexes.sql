-- The per-org partial HNSW indexes on memories (named memories_hnsw_org_<org uuid hex>), with validity
-- (a failed CREATE INDEX CONCURRENTLY leaves an INVALID index behind) and size.
SELECT c.relname AS index, i.indisvalid AS valid, pg_relation_size(c.oid)::bigint AS bytes
  FROM pg_index i
  JOIN pg_class c ON c.oid = i.indexrelid
 WHERE i.indrelid = 'memories'::regclass
   AND c.relname LIKE 'memories\_hnsw\_org\_%'
 ORDER BY c.relname
