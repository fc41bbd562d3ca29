-- Orgs with consolidation jobs due (SECURITY DEFINER function: org ids only), at most $1.
SELECT org_id FROM pgcontext_consolidation_due($1)
