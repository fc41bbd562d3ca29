-- Whether the agent has live memories of its own (not document chunks, not messages): an agent without any gets the
-- org-wide hot set, cached once per org (service.assembly.hot). One probe of memories_hot_candidates.
SELECT EXISTS (
    SELECT 1 FROM memories
     WHERE org_id = $1 AND agent_id = $2 AND source_path IS NULL AND conversation_id IS NULL AND (expires_at IS NULL OR expires_at > now())
)
