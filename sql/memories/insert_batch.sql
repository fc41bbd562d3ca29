-- Insert a batch of memories from parallel arrays; returns their ids in input order. A null occurred_at is the write time;
-- $11 the search contexts (null: none; the lexical trigger indexes them, migration 0008).
-- $12 the ids (assigned beforehand, service.memories.facts), $13 normalized-text hashes, $14 keys, $15 valid_until, $16 superseded_by
-- (a late value of a key, stored already retired: superseded_at is then now()).
WITH input AS (
    SELECT t.*
      FROM unnest($2::text[], $3::text[], $4::text[], $5::vector[], $6::jsonb[], $7::real[], $8::bool[],
                  $9::timestamptz[], $10::timestamptz[], $11::text[], $12::uuid[], $13::bytea[], $14::text[],
                  $15::timestamptz[], $16::uuid[])
           WITH ORDINALITY AS t(agent_id, kind, text, embedding, metadata, importance, pinned, expires_at, occurred_at,
                                search_context, id, text_hash, key, valid_until, superseded_by, ord)
), inserted AS (
    INSERT INTO memories (org_id, id, agent_id, kind, text, embedding, metadata, importance, pinned, expires_at,
                          occurred_at, search_context, text_hash, key, valid_until, superseded_by, superseded_at)
    SELECT $1, id, agent_id, kind, text, embedding, metadata, importance, pinned, expires_at,
           coalesce(occurred_at, now()), search_context, text_hash, key, valid_until, superseded_by,
           CASE WHEN superseded_by IS NOT NULL THEN now() END FROM input
    RETURNING id
)
SELECT input.id FROM input JOIN inserted USING (id) ORDER BY input.ord
