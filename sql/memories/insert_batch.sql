-- Insert a batch of memories from parallel arrays; returns their ids in input order. A null occurred_at is the write time;
-- $11 the search contexts (null: none; the lexical trigger indexes them, migration 0008).
WITH input AS (
    SELECT pgcontext_uuidv7() AS id, t.*
      FROM unnest($2::text[], $3::text[], $4::text[], $5::vector[], $6::jsonb[], $7::real[], $8::bool[],
                  $9::timestamptz[], $10::timestamptz[], $11::text[])
           WITH ORDINALITY AS t(agent_id, kind, text, embedding, metadata, importance, pinned, expires_at, occurred_at,
                                search_context, ord)
), inserted AS (
    INSERT INTO memories (org_id, id, agent_id, kind, text, embedding, metadata, importance, pinned, expires_at,
                          occurred_at, search_context)
    SELECT $1, id, agent_id, kind, text, embedding, metadata, importance, pinned, expires_at,
           coalesce(occurred_at, now()), search_context FROM input
    RETURNING id
)
SELECT input.id FROM input JOIN inserted USING (id) ORDER BY input.ord
