-- The DDL dropping one partial HNSW index ($1 index name), quoted by format(); run outside a transaction.
SELECT format('DROP INDEX CONCURRENTLY IF EXISTS %I', $1::text)
