-- Delete document rows of a collection by path; returns the deleted paths and their owners.
DELETE FROM documents
 WHERE org_id = $1 AND collection = $2 AND path = ANY($3::text[])
RETURNING path, agent_id
