"""What keeps one org from observing or starving another outside the database: per-org rate limits and
their prices, per-org bounds on Redis caches, and the org scope of in-process caches."""
