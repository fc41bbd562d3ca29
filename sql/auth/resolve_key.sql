-- Map an API key hash to its org (SECURITY DEFINER function; revoked keys resolve to nothing).
SELECT org_id, key_id FROM pgcontext_resolve_api_key($1)
