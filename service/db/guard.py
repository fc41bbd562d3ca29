"""What every schema upgrade checks and holds, and the start-up check of ``serve --no-migrate``.

``migrations/env.py`` runs these around Alembic's migrations, online and in the offline (``--sql``)
script alike: the server requirements first, a session advisory lock for the whole run (so two
concurrent upgrades are serialized: the second waits, then finds the schema at head), and at the end
a grant that lets the service role read ``alembic_version``. ``serve --no-migrate`` connects as that
role only and refuses to start unless the recorded revision is this code's head.

The SQL here is plain (no ``%``, no bind parameters, no catalog lookups in Python), so the same text
works through SQLAlchemy online and in a reviewed script applied with ``psql``.
"""

from __future__ import annotations

import asyncio

import asyncpg

from service.db.migrate import APP_ROLE, alembic_config, file_head
from service.db.queries import query

MIN_SERVER_VERSION_NUM = 160000
"""PostgreSQL 16: the oldest server the schema and queries are written for (the tests run 18 for
real; for 16 and 17 they check the portable UUIDv7 and that no 17/18-only function is used)."""
MIN_PGVECTOR = (0, 8)
"""pgvector 0.8: iterative HNSW scans (``hnsw.iterative_scan``) keep org-filtered searches complete."""
MIGRATION_LOCK_KEY = 7_063_485_093_071_431_474
"""Session advisory lock key held by every upgrade (``pg_advisory_lock``; any fixed bigint would do)."""
VERSION_TABLE = "alembic_version"


def requirements_sql(min_server: int = MIN_SERVER_VERSION_NUM, min_pgvector: tuple[int, int] = MIN_PGVECTOR) -> str:
    """A DO block that fails with SQLSTATE 0A000 and a plain message when the server is too old or has
    no (or too old a) pgvector; the installed version counts, else the one ``CREATE EXTENSION`` would get."""
    server_label = f"{min_server // 10000}"
    vector_label = ".".join(map(str, min_pgvector))
    vector_array = ", ".join(map(str, min_pgvector))
    return f"""
    DO $$
    DECLARE
        installed text := (SELECT extversion FROM pg_extension WHERE extname = 'vector');
        available text := (SELECT default_version FROM pg_available_extensions WHERE name = 'vector');
        found text := coalesce(installed, available);
    BEGIN
        IF current_setting('server_version_num')::int < {min_server} THEN
            RAISE EXCEPTION USING ERRCODE = 'feature_not_supported',
                MESSAGE = 'pgcontext needs PostgreSQL {server_label} or newer; this server is PostgreSQL '
                          || current_setting('server_version'),
                HINT = 'Run pgcontext on PostgreSQL 16, 17 or 18 with pgvector {vector_label} or newer.';
        END IF;
        IF found IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = 'feature_not_supported',
                MESSAGE = 'pgcontext needs the pgvector extension ({vector_label} or newer); '
                          || 'this server does not have it',
                HINT = 'Install pgvector on the database server (e.g. the postgresql-NN-pgvector package).';
        END IF;
        IF string_to_array(regexp_replace(found, '[^0-9.].*$', ''), '.')::int[] < ARRAY[{vector_array}] THEN
            RAISE EXCEPTION USING ERRCODE = 'feature_not_supported',
                MESSAGE = 'pgcontext needs pgvector {vector_label} or newer; this database has '
                          || CASE WHEN installed IS NULL THEN 'only ' || available || ' available'
                                  ELSE installed || ' installed' END,
                HINT = 'Install pgvector {vector_label}+ on the server, then ALTER EXTENSION vector UPDATE '
                       || 'in each database that has it.';
        END IF;
    END
    $$
    """


LOCK_SQL = f"SELECT pg_advisory_lock({MIGRATION_LOCK_KEY})"
UNLOCK_SQL = f"SELECT pg_advisory_unlock({MIGRATION_LOCK_KEY})"

GRANT_VERSION_SQL = f"""
    DO $$
    BEGIN
        -- Nested: the inner IF is planned only once the table is known to exist.
        IF to_regclass('{VERSION_TABLE}') IS NOT NULL
           AND EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{APP_ROLE}') THEN
            IF EXISTS (SELECT 1 FROM {VERSION_TABLE})
               AND NOT has_table_privilege('{APP_ROLE}', '{VERSION_TABLE}', 'SELECT') THEN
                GRANT SELECT ON {VERSION_TABLE} TO {APP_ROLE};
            END IF;
        END IF;
    END
    $$
"""
"""Lets the service role read the recorded revision (``serve --no-migrate`` checks it) once a schema
exists; idempotent, and a no-op (no write) when already granted."""


class SchemaNotCurrent(RuntimeError):
    """The database's recorded revision is not this code's head: ``serve --no-migrate`` must not start."""


HOW_TO_MIGRATE = ("migrate it as the owner role first: `pgcontext migrate` with PGCONTEXT_DATABASE_URL set, "
                  "or `alembic upgrade head` (`alembic upgrade head --sql` writes the script for review)")


async def recorded_revision(dsn: str) -> str | None:
    """The revision in ``alembic_version`` (None: never migrated). Raises SchemaNotCurrent when the role
    connected by ``dsn`` may not read it."""
    conn = await asyncpg.connect(dsn)
    try:
        value = await conn.fetchval(query("schema.revision"))
    except asyncpg.UndefinedTableError:
        return None
    except asyncpg.InsufficientPrivilegeError as exc:
        raise SchemaNotCurrent(f"this role may not read {VERSION_TABLE} (granted by every upgrade since "
                               f"--no-migrate exists): {HOW_TO_MIGRATE}") from exc
    finally:
        await conn.close()
    return None if value is None else str(value)


def check_revision(current: str | None, heads: tuple[str, ...], known: set[str]) -> None:
    """Raise SchemaNotCurrent (one line: current vs required revision and how to migrate) unless
    ``current`` is a head."""
    if current in heads:
        return
    required = ", ".join(heads)
    if current is None:
        state = "has no pgcontext schema yet"
    elif current in known:
        state = f"is at revision {current}"
    else:
        state = f"is at revision {current}, which this pgcontext does not know (written by a newer version?)"
    raise SchemaNotCurrent(f"the database schema {state}; this pgcontext needs revision {required} (head): "
                           f"{HOW_TO_MIGRATE}")


def at_head(dsn: str) -> bool:
    """Whether the database is at this code's head revision, by one query (no Alembic): a start that
    finds it so has nothing to migrate."""
    head = file_head()
    return head is not None and asyncio.run(recorded_revision(dsn)) == head


def require_head(dsn: str) -> None:
    """For ``serve --no-migrate``: return when the database is at head, else raise SchemaNotCurrent."""
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(alembic_config(dsn))  # type: ignore[arg-type]
    known = {rev.revision for rev in script.walk_revisions()}
    check_revision(asyncio.run(recorded_revision(dsn)), tuple(script.get_heads()), known)
