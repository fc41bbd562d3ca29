-- Erasure: remove every event that holds the text of memories $2 or of a memory merged into them (not undone), and every
-- event recorded under agent $3 (null: none by agent), with their consolidation jobs. That is: the histories of $2 and of
-- what was merged into them (recursively), the `merged` / `consolidated` events elsewhere that recorded one of those as
-- merged away or decided on it (the kept memory's copy of an erased duplicate's text), and the `undone` events of the
-- events removed. Returns how many events went.
WITH RECURSIVE erased(id) AS (
    SELECT unnest($2::uuid[])
    UNION
    SELECT e.related_id
      FROM memory_events e JOIN erased ON e.memory_id = erased.id
     WHERE e.org_id = $1 AND e.event IN ('merged', 'consolidated') AND e.detail ? 'item' AND e.related_id IS NOT NULL
       AND NOT EXISTS (SELECT 1 FROM memory_events u WHERE u.org_id = $1 AND u.undoes = e.id)
), holding AS (
    SELECT e.id FROM memory_events e
     WHERE e.org_id = $1
       AND (e.memory_id IN (SELECT id FROM erased)
            OR (e.related_id IN (SELECT id FROM erased)
                AND (e.event = 'consolidated' OR (e.event = 'merged' AND e.detail ? 'item')))
            OR ($3::text IS NOT NULL AND e.agent_id = $3))
), jobs AS (
    DELETE FROM consolidation_jobs WHERE org_id = $1 AND memory_id IN (SELECT id FROM erased)
), gone AS (
    DELETE FROM memory_events
     WHERE org_id = $1 AND (id IN (SELECT id FROM holding) OR undoes IN (SELECT id FROM holding))
    RETURNING 1
)
SELECT count(*) FROM gone
