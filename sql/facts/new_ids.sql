-- $1 fresh memory ids (UUIDv7, in creation order), assigned before a write so merges, supersessions and history can name rows not yet inserted; with the transaction's time (a write's default occurred_at).
SELECT pgcontext_uuidv7() AS id, now() AS now FROM generate_series(1, $1::int) AS g(n) ORDER BY g.n
