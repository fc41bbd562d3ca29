-- Delete every conversation of agent $2 (data-subject erasure, after its memories; messages written since go with them).
DELETE FROM conversations WHERE org_id = $1 AND agent_id = $2
