"""The service role loses what every role gets by default and it does not need: temporary tables, and the
text of other sessions' statements.

Every org's requests run as ``pgcontext_app``, and by default a role reads ``pg_stat_activity``'s
``query`` of every session of its own role: each session could read what the others run. Temporary
tables are a way to hold data and memory outside the tenant tables and their row-level security.
PostgreSQL grants both to ``PUBLIC`` (``TEMPORARY`` on the database, ``EXECUTE`` on the activity
functions), so they are taken from ``PUBLIC`` here, in this database only:

- ``REVOKE TEMPORARY ON DATABASE <this database> FROM PUBLIC`` (the database owner keeps it);
- ``REVOKE EXECUTE ON FUNCTION pg_stat_get_activity(integer), pg_stat_get_backend_activity(integer)
  FROM PUBLIC``, granted back to ``pg_read_all_stats`` (which ``pg_monitor`` holds): monitoring roles and
  superusers still read ``pg_stat_activity``; other roles get "permission denied".

Changing a database's and the catalog's privileges needs its owner or a superuser (the embedded server's
owner is one). Run by a role that cannot, PostgreSQL warns "no privileges could be revoked" and this
migration warns what is left for a DBA to run (docs/operations.md, "Roles and grants").

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-05
"""

from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

ACTIVITY_FUNCTIONS = ("pg_catalog.pg_stat_get_activity(integer)", "pg_catalog.pg_stat_get_backend_activity(integer)")


def upgrade() -> None:
    op.execute("DO $$ BEGIN EXECUTE format('REVOKE TEMPORARY ON DATABASE %I FROM PUBLIC', current_database()); END $$")
    for function in ACTIVITY_FUNCTIONS:
        op.execute(f"REVOKE EXECUTE ON FUNCTION {function} FROM PUBLIC")
        op.execute(f"GRANT EXECUTE ON FUNCTION {function} TO pg_read_all_stats")
    op.execute(
        """
        DO $$ BEGIN
            IF has_database_privilege('pgcontext_app', current_database(), 'TEMPORARY')
               OR has_function_privilege('pgcontext_app', 'pg_catalog.pg_stat_get_activity(integer)', 'EXECUTE')
            THEN
                RAISE WARNING 'pgcontext_app can still create temporary tables or read other sessions'' '
                    'statements: as the database owner or a superuser, run the statements of '
                    'docs/operations.md, "Roles and grants"';
            END IF;
        END $$
        """
    )


def downgrade() -> None:
    for function in reversed(ACTIVITY_FUNCTIONS):
        op.execute(f"REVOKE EXECUTE ON FUNCTION {function} FROM pg_read_all_stats")
        op.execute(f"GRANT EXECUTE ON FUNCTION {function} TO PUBLIC")
    op.execute("DO $$ BEGIN EXECUTE format('GRANT TEMPORARY ON DATABASE %I TO PUBLIC', current_database()); END $$")
