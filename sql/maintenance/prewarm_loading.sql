-- How many of pg_prewarm's autoprewarm workers are still reading the saved buffers back after a start (each exits when its database is done; 0 without pg_prewarm). Visible to the owner, not to the service role.
SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'autoprewarm worker'
