-- Create conversation $2 of agent $3 (null: org-wide) on its first append, or lock it for this append: concurrent appends to one conversation wait here, which gives their messages one order. Returns its agent, the messages it holds and whether this call created it.
INSERT INTO conversations AS c (org_id, id, agent_id) VALUES ($1, $2, $3)
ON CONFLICT (org_id, id) DO UPDATE SET message_count = c.message_count
RETURNING c.agent_id, c.message_count, c.created_at, (c.xmax = 0) AS created
