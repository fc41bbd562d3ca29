-- The export's first line: what it is, for whom (agent_id null: the whole org), when (the transaction's start), as one NDJSON object.
SELECT jsonb_build_object('type', 'export', 'format', 1, 'org_id', $1::uuid, 'agent_id', $2::text,
                          'exported_at', now())::text
