-- Restore exported memories (POST /v1/import; their conversations are in place: export.import_conversations): $2 their export lines (jsonb: every column but the vector, read with the table's own types), $3 their vectors and $4 normalized-text hashes (computed again), in the same order; what a line lacks takes the column's default (older exports); an id the org already holds is left as it is. Returns the ids written.
WITH input AS (
    SELECT t.vec, t.text_hash AS hash, r.*
      FROM unnest($2::jsonb[], $3::vector[], $4::bytea[]) AS t(line, vec, text_hash),
           jsonb_populate_record(NULL::memories, t.line) AS r
)
INSERT INTO memories (org_id, id, agent_id, kind, text, embedding, metadata, importance, usefulness, feedback_count,
                      pinned, created_at, updated_at, expires_at, occurred_at, search_context, text_hash, key,
                      valid_until, superseded_by, superseded_at, seen_count, last_seen_at, first_occurred_at,
                      last_occurred_at, conversation_id, position, message_id, session_id, speaker, role)
SELECT $1, id, agent_id, coalesce(kind, 'fact'), text, vec, coalesce(metadata, '{}'::jsonb), coalesce(importance, 0.5),
       coalesce(usefulness, 0), coalesce(feedback_count, 0), coalesce(pinned, false), coalesce(created_at, now()),
       coalesce(updated_at, created_at, now()), expires_at, coalesce(occurred_at, created_at, now()), search_context,
       hash, key, valid_until, superseded_by,
       CASE WHEN superseded_by IS NOT NULL THEN coalesce(superseded_at, now()) END, coalesce(seen_count, 1),
       last_seen_at, first_occurred_at, last_occurred_at, conversation_id, position, message_id, session_id, speaker,
       role
  FROM input
ON CONFLICT (org_id, id) DO NOTHING
RETURNING id, agent_id
