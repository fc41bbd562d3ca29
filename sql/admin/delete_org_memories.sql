-- The first step of deleting org $1: its memories (messages and document chunks too), while the org still
-- exists, since the delete trigger that takes their postings updates the org's term statistics (which a
-- cascade from orgs would already have removed).
DELETE FROM memories WHERE org_id = $1
