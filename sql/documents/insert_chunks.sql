-- Insert document chunks (kind document_chunk) from parallel arrays; returns their ids in input order.
WITH input AS (
    SELECT pgcontext_uuidv7() AS id, t.*
      FROM unnest($2::text[], $3::text[], $4::vector[], $5::jsonb[], $6::text[], $7::int[], $8::int[], $9::text[],
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
