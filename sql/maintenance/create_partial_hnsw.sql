-- The DDL of one org's partial HNSW index ($1 index name, $2 org id), quoted by format(); DDL takes no bind
-- parameters, so the caller executes the returned text outside a transaction (CONCURRENTLY).
-- Same graph parameters as the global memories_embedding_hnsw.
SELECT format('CREATE INDEX CONCURRENTLY IF NOT EXISTS %I ON memories '
              'USING hnsw (embedding vector_cosine_ops) WITH (m = 16, ef_construction = 64) '
              'WHERE org_id = %L::uuid', $1::text, $2::uuid)
