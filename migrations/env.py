"""Alembic environment: plain SQL migrations run as the owner role over psycopg."""

from __future__ import annotations

import os

from alembic import context
from sqlalchemy import create_engine, pool


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
    context.configure(url=_dsn(), literal_binds=True, transaction_per_migration=True)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    engine = create_engine(_dsn(), poolclass=pool.NullPool)
    with engine.connect() as connection:
        context.configure(connection=connection, transaction_per_migration=True)
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
