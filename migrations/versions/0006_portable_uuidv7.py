"""Portable UUIDv7 for databases created before 0001 gained it.

0001 now creates ``pgcontext_uuidv7()`` (PostgreSQL 18's native ``uuidv7`` where it exists, else
``pgcontext_uuidv7_portable()``) and uses it as the id default, so the schema runs on PostgreSQL
16-18. A database migrated to 0004 or 0005 before that change has neither function, its id columns
default to PostgreSQL 18's native ``uuidv7``, and the named SQL (``memories.insert_batch``,
``documents.insert_chunks``), which now calls ``pgcontext_uuidv7()``, would fail there. This
revision creates (or replaces, with the same definitions) both functions and points the defaults at
them; on a database created by the current 0001 it changes nothing. The SQL is a copy of 0001's on
purpose: a revision is a frozen snapshot and must not change when another file does.

Downgrade does nothing: the functions belong to 0001 (whose downgrade drops them), and the defaults
are what 0001 sets.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-30
"""

from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

ID_DEFAULTS = ("orgs", "api_keys", "memories")

UUIDV7_PORTABLE = """
    CREATE OR REPLACE FUNCTION pgcontext_uuidv7_portable() RETURNS uuid
    LANGUAGE sql VOLATILE PARALLEL SAFE
    AS $fn$
        SELECT encode(substring(int8send(t.us / 1000) FROM 3)
                      || int2send((28672 + mod(t.us, 1000) * 4096 / 1000)::smallint)
                      || substring(uuid_send(gen_random_uuid()) FROM 9),
                      'hex')::uuid
          FROM (SELECT floor(extract(epoch FROM clock_timestamp()) * 1000000)::bigint AS us) AS t
    $fn$
"""
UUIDV7 = """
    DO $$
    BEGIN
        IF current_setting('server_version_num')::int >= 180000 THEN
            CREATE OR REPLACE FUNCTION pgcontext_uuidv7() RETURNS uuid LANGUAGE sql VOLATILE PARALLEL SAFE
            AS $fn$ SELECT uuidv7() $fn$;
        ELSE
            CREATE OR REPLACE FUNCTION pgcontext_uuidv7() RETURNS uuid LANGUAGE sql VOLATILE PARALLEL SAFE
            AS $fn$ SELECT pgcontext_uuidv7_portable() $fn$;
        END IF;
    END
    $$
"""


def upgrade() -> None:
    op.execute(UUIDV7_PORTABLE)
    op.execute(UUIDV7)
    for table in ID_DEFAULTS:
        op.execute(f"ALTER TABLE {table} ALTER COLUMN id SET DEFAULT pgcontext_uuidv7()")


def downgrade() -> None:
    pass
