-- Feedback as an exponential moving average: usefulness = decay * usefulness + add (per id, computed by the caller), clamped to [-1, 1]; other orgs' ids and expired memories (gone for every read) match nothing. The rows are locked in id order first, so feedback requests naming the same memories in other orders (through any service instance) wait for each other instead of deadlocking.
WITH u AS (
    SELECT * FROM unnest($2::uuid[], $3::float8[], $4::float8[], $5::int[]) AS u(id, decay, add, n)
), locked AS (
    SELECT m.id FROM memories m
     WHERE m.org_id = $1 AND m.id IN (SELECT id FROM u) AND (m.expires_at IS NULL OR m.expires_at > now())
     ORDER BY m.id FOR UPDATE
)
UPDATE memories m
   SET usefulness = greatest(-1.0, least(1.0, u.decay * m.usefulness + u.add)),
       feedback_count = m.feedback_count + u.n
  FROM u
 WHERE m.org_id = $1 AND m.id = u.id AND m.id IN (SELECT id FROM locked)
RETURNING m.id, m.agent_id, m.usefulness, m.feedback_count
