-- Memories per org from the sharded BM25 counters (at most 8 rows per org), not a scan of memories:
-- orgs with at least $1 rows.
SELECT org_id, sum(n_docs)::bigint AS n
  FROM memory_lex_stats
 GROUP BY org_id
HAVING sum(n_docs) >= $1
