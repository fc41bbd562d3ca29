-- What deleting org $1 takes with it (owner role only): keys, memories, document chunks, conversations,
-- directives.
SELECT (SELECT count(*) FROM api_keys WHERE org_id = $1 AND revoked_at IS NULL) AS active_keys,
       (SELECT count(*) FROM memories WHERE org_id = $1 AND kind <> 'document_chunk') AS memories,
       (SELECT count(*) FROM memories WHERE org_id = $1 AND kind = 'document_chunk') AS document_chunks,
       (SELECT count(*) FROM conversations WHERE org_id = $1) AS conversations,
       (SELECT count(*) FROM directives WHERE org_id = $1 AND content IS NOT NULL) AS directives
