"""Alembic environment: plain SQL migrations run as the owner role over psycopg.

Online (``alembic upgrade head``): one connection holds a session advisory lock for the whole run, so
concurrent upgrades are serialized (the second waits, then finds the schema at head and does
nothing); the server requirements (PostgreSQL >= 16, pgvector >= 0.8) are checked before any
migration; afterwards the service role is allowed to read ``alembic_version``.

Offline (``alembic upgrade head --sql``): the same steps are written into the script, which needs no
database to be produced and applies with ``psql -v ON_ERROR_STOP=1 -f``.
"""

from __future__ import annotations

import os
from logging.config import fileConfig

from alembic import context
from sqlalchemy import create_engine, exc, pool
from sqlalchemy.engine import Connection

from service.db import guard


def _dsn() -> str:
    dsn = (
        context.get_x_argument(as_dictionary=True).get("dsn")
        or context.config.attributes.get("dsn")
        or os.environ.get("PGCONTEXT_DATABASE_URL")
        or os.environ.get("DATABASE_URL")
    )
    if not dsn:
        raise SystemExit(
            "No database: pass `alembic -x dsn=postgresql://...` or set PGCONTEXT_DATABASE_URL."
        )
    # SQLAlchemy needs the driver named; accept the plain libpq form DBAs use everywhere else.
    for prefix in ("postgresql://", "postgres://"):
        if dsn.startswith(prefix):
            return "postgresql+psycopg://" + dsn[len(prefix) :]
    return dsn


def run_migrations_offline() -> None:
    # "named" paramstyle: the text is written as is (psycopg's "pyformat" would double every `%`,
    # which psql then rejects). No URL: producing a script never touches a database.
    context.configure(dialect_name="postgresql", dialect_opts={"paramstyle": "named"}, literal_binds=True,
                      transaction_per_migration=True)
    context.execute(guard.LOCK_SQL)
    context.execute(guard.requirements_sql())
    with context.begin_transaction():
        context.run_migrations()
    context.execute(guard.GRANT_VERSION_SQL)
    context.execute(guard.UNLOCK_SQL)


def _check_requirements(connection: Connection) -> None:
    try:
        connection.exec_driver_sql(guard.requirements_sql())
    except exc.DBAPIError as error:
        diag = getattr(error.orig, "diag", None)
        if getattr(error.orig, "sqlstate", None) != "0A000" or diag is None:
            raise
        raise SystemExit(f"error: {diag.message_primary}. {diag.message_hint}") from None
    connection.commit()


def run_migrations_online() -> None:
    engine = create_engine(_dsn(), poolclass=pool.NullPool)
    with engine.connect() as connection:
        # Session-level, so it spans the per-migration transactions; if anything fails, closing the
        # connection releases it.
        connection.exec_driver_sql(guard.LOCK_SQL)
        connection.commit()
        _check_requirements(connection)
        context.configure(connection=connection, transaction_per_migration=True)
        with context.begin_transaction():
            context.run_migrations()
        connection.exec_driver_sql(guard.GRANT_VERSION_SQL)
        connection.exec_driver_sql(guard.UNLOCK_SQL)
        connection.commit()
    engine.dispose()


# The `alembic` command logs each step ("Running upgrade 0001 -> 0002") per alembic.ini; called from
# `pgcontext` (no command-line options) the service's own logging stays as it is.
if context.config.cmd_opts is not None and context.config.config_file_name is not None:
    fileConfig(context.config.config_file_name, disable_existing_loggers=False)

if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
