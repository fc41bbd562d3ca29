-- Serialize fact writers per (org, agent scope) until the transaction ends: duplicate and key checks see every committed write of the scope, so two writers of one fact end with one memory. Scopes ($2; '' is org-wide) are locked in sorted order, so writers of several scopes never deadlock.
SELECT count(pg_advisory_xact_lock(hashtextextended('pgcontext.facts:' || $1::text || ':' || s.scope, 0)))
  FROM (SELECT DISTINCT scope FROM unnest($2::text[]) AS u(scope) ORDER BY scope) AS s
