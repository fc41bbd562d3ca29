-- The org's cache epoch (0 until a cache write or invalidation of the org first failed).
SELECT coalesce((SELECT epoch FROM cache_epochs WHERE org_id = $1), 0)
