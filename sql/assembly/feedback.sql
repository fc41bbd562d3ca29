-- Feedback as an exponential moving average: usefulness = decay * usefulness + add (per id, computed by the caller), clamped to [-1, 1]; other orgs' ids match nothing.
UPDATE memories m
   SET usefulness = greatest(-1.0, least(1.0, u.decay * m.usefulness + u.add)),
       feedback_count = m.feedback_count + u.n
  FROM unnest($2::uuid[], $3::float8[], $4::float8[], $5::int[]) AS u(id, decay, add, n)
 WHERE m.org_id = $1 AND m.id = u.id
RETURNING m.id, m.agent_id, m.usefulness, m.feedback_count
