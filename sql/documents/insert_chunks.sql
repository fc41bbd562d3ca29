-- Insert document chunks (kind document_chunk) from parallel arrays; returns their ids in input order.
-- Ids strictly increase in input order, so the chunks of a file read back in (level, line_start,
-- line_end, id) order come back in the order they were chunked: the pieces of one over-long line share
-- their span, and only the id orders them. One pgcontext_uuidv7() is taken for the whole statement
-- and its last 4 bytes (random bits of a UUIDv7) are replaced by the row's ordinal, big-endian: the
-- time fields, version and variant stay, and the ids order as the ordinals do (uuid comparison is
-- bytewise). A uuidv7 per row is not enough: on PostgreSQL 16/17 pgcontext_uuidv7_portable() has
-- microsecond resolution and random bits below it, so rows made in the same microsecond would order
-- at random. The 30 random bits left beside the ordinal keep ids of concurrent statements apart. (Ids
-- made here rather than by the service keep the server's clock, as every other row's id does.)
WITH base AS MATERIALIZED (
    SELECT uuid_send(pgcontext_uuidv7()) AS bytes
), input AS (
    SELECT encode(overlay(base.bytes PLACING int4send(t.ord::int) FROM 13 FOR 4), 'hex')::uuid AS id, t.*
      FROM base,
           unnest($2::text[], $3::text[], $4::vector[], $5::jsonb[], $6::text[], $7::int[], $8::int[], $9::text[],
                  $10::text[], $11::smallint[])
           WITH ORDINALITY AS t(agent_id, text, embedding, metadata, source_path, line_start, line_end,
                                section_title, breadcrumb, level, ord)
), inserted AS (
    INSERT INTO memories (org_id, id, agent_id, kind, text, embedding, metadata, source_path, line_start, line_end,
                          section_title, breadcrumb, level)
    SELECT $1, id, agent_id, 'document_chunk', text, embedding, metadata, source_path, line_start, line_end,
           section_title, breadcrumb, level
      FROM input
    RETURNING id
)
SELECT input.id FROM input JOIN inserted USING (id) ORDER BY input.ord
