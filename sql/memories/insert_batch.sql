-- Insert a batch of memories from parallel arrays; returns their ids in input order. A null occurred_at is the write time.
WITH input AS (
    SELECT uuidv7() AS id, t.*
      FROM unnest($2::text[], $3::text[], $4::text[], $5::vector[], $6::jsonb[], $7::real[], $8::bool[],
                  $9::timestamptz[], $10::timestamptz[])
           WITH ORDINALITY AS t(agent_id, kind, text, embedding, metadata, importance, pinned, expires_at, occurred_at,
                                ord)
), inserted AS (
    INSERT INTO memories (org_id, id, agent_id, kind, text, embedding, metadata, importance, pinned, expires_at,
                          occurred_at)
    SELECT $1, id, agent_id, kind, text, embedding, metadata, importance, pinned, expires_at,
           coalesce(occurred_at, now()) FROM input
    RETURNING id
)
SELECT input.id FROM input JOIN inserted USING (id) ORDER BY input.ord
