-- Fault-injection knob (settings only): sleep inside the branch's transaction, so statement_timeout covers it.
SELECT pg_sleep($1::float8 / 1000)
