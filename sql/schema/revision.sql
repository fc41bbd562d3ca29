-- The schema revision Alembic recorded (one row once migrated); read by `serve --no-migrate` as the service role.
SELECT version_num FROM alembic_version
