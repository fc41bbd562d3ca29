-- Whether any org exists yet (first start creates the default org).
SELECT EXISTS (SELECT 1 FROM orgs)
