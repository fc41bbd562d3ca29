-- Delete org $1 (after admin.delete_org_memories) and, through the ON DELETE CASCADE of every org_id
-- foreign key, everything else it holds; returns its id when it existed.
DELETE FROM orgs WHERE id = $1 RETURNING id
