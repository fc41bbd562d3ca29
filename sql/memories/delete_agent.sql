-- Delete up to $3 of an agent's memories (data-subject erasure, in batches); document chunks are left to /v1/documents, which keeps each file and its chunks together. Returns the ids that went (their histories go next).
DELETE FROM memories
 WHERE org_id = $1 AND id IN (
     SELECT id FROM memories
      WHERE org_id = $1 AND agent_id = $2 AND kind <> 'document_chunk'
      LIMIT $3)
RETURNING id
