-- The last $5 messages of each session $3 of conversation $2 (and, $4 true, of its messages without a session), in order: the turns before an append from which its messages' search contexts are derived.
SELECT position, session_id, speaker, role, text
  FROM (SELECT t.*
          FROM unnest($3::text[]) AS s(session_id)
         CROSS JOIN LATERAL (
               SELECT position, session_id, speaker, role, text
                 FROM memories
                WHERE org_id = $1 AND conversation_id = $2 AND session_id = s.session_id
                ORDER BY position DESC
                LIMIT $5) AS t
        UNION ALL
        (SELECT position, session_id, speaker, role, text
           FROM memories
          WHERE $4 AND org_id = $1 AND conversation_id = $2 AND session_id IS NULL
          ORDER BY session_id DESC, position DESC  -- the order of the session index, as the branch above reads it
          LIMIT $5)) AS turns
 ORDER BY position
