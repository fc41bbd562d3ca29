-- Release the maintenance run's session lock.
SELECT pg_advisory_unlock(hashtext('pgcontext:maintain'))
