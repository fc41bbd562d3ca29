-- Serialize first starts (transaction-scoped): service instances started together on an empty database create one default org, not one each.
SELECT pg_advisory_xact_lock(hashtext('pgcontext:first-start'))
