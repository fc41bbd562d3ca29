-- A Redis write or invalidation of the org failed after its Postgres commit: entries cached under
-- an older epoch are no longer trusted by any instance.
INSERT INTO cache_epochs AS e (org_id, epoch) VALUES ($1, 1)
ON CONFLICT (org_id) DO UPDATE SET epoch = e.epoch + 1, bumped_at = now()
RETURNING epoch
