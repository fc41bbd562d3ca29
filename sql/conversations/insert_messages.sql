-- Insert messages of conversation $2 (kind message) from parallel arrays; returns their ids in input order. A null occurred_at is the write time; $7 the derived search contexts (null: none).
WITH input AS (
    SELECT pgcontext_uuidv7() AS id, t.*
      FROM unnest($4::text[], $5::vector[], $6::jsonb[], $7::timestamptz[], $8::text[], $9::bigint[], $10::text[],
                  $11::text[], $12::text[], $13::text[])
           WITH ORDINALITY AS t(text, embedding, metadata, occurred_at, search_context, position, message_id,
                                session_id, speaker, role, ord)
), inserted AS (
    INSERT INTO memories (org_id, id, agent_id, kind, text, embedding, metadata, occurred_at, search_context,
                          conversation_id, position, message_id, session_id, speaker, role)
    SELECT $1, id, $3, 'message', text, embedding, metadata, coalesce(occurred_at, now()), search_context,
           $2, position, message_id, session_id, speaker, role
      FROM input
    RETURNING id
)
SELECT input.id FROM input JOIN inserted USING (id) ORDER BY input.ord
