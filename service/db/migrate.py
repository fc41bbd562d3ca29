"""Schema migrations (Alembic, run as the owner) and the service role's connection string."""

from __future__ import annotations

import hashlib
import re
from importlib import resources
from pathlib import Path
from urllib.parse import quote, urlsplit, urlunsplit

import asyncpg

APP_ROLE = "pgcontext_app"


def migrations_dir() -> Path:
    """The Alembic folder (env.py, versions/, alembic.ini): the repository's ``migrations/``, installed
    as the package ``service._migrations`` in both wheel and editable installs."""
    folder = resources.files("service._migrations")
    if not isinstance(folder, Path):  # Alembic reads its scripts from a real directory
        raise RuntimeError(f"pgcontext's migrations are not on the file system ({folder}); install it unzipped")
    return folder


def alembic_config(dsn: str) -> object:
    from alembic.config import Config

    folder = migrations_dir()
    config = Config(str(folder / "alembic.ini"))
    # The ini's script_location is relative to the repository's top (where a DBA runs `alembic`).
    config.set_main_option("script_location", str(folder))
    config.attributes["dsn"] = dsn
    return config


def upgrade(dsn: str, revision: str = "head") -> None:
    from alembic import command

    command.upgrade(alembic_config(dsn), revision)  # type: ignore[arg-type]


def downgrade(dsn: str, revision: str = "base") -> None:
    from alembic import command

    command.downgrade(alembic_config(dsn), revision)  # type: ignore[arg-type]


def heads() -> tuple[str, ...]:
    """The head revision(s) of this code's migrations."""
    from alembic.script import ScriptDirectory

    return tuple(ScriptDirectory.from_config(alembic_config("")).get_heads())  # type: ignore[arg-type]


_REVISION = re.compile(r"^revision\s*(?::[^=]*)?=\s*[\"']([^\"']+)[\"']", re.MULTILINE)
_DOWN_REVISION = re.compile(r"^down_revision\s*(?::[^=]*)?=(.*)$", re.MULTILINE)


def file_head() -> str | None:
    """The head revision as the migration files' own ``revision`` / ``down_revision`` lines say, without
    Alembic (over half a second to import, on every start of ``pgcontext serve``); None unless that
    is exactly one head. ``tests/unit/test_migrations_head.py`` keeps it equal to :func:`heads`."""
    revisions: set[str] = set()
    parents: set[str] = set()
    for path in (migrations_dir() / "versions").glob("*.py"):
        text = path.read_text()
        revision = _REVISION.search(text)
        down = _DOWN_REVISION.search(text)
        if revision is None or down is None:
            return None
        revisions.add(revision.group(1))
        parents.update(re.findall(r"[\"']([^\"']+)[\"']", down.group(1)))
    heads = revisions - parents
    return heads.pop() if len(heads) == 1 else None


def change_line(before: str | None, after: str | None, head_revisions: tuple[str, ...]) -> str:
    """What ``pgcontext migrate`` prints: the schema's revision before and after (None: no schema)."""

    def label(revision: str | None) -> str:
        if revision is None:
            return "base (empty)"
        return f"{revision} (head)" if revision in head_revisions else revision

    if before == after:
        return f"schema already at head ({after})" if after in head_revisions else f"schema already at {label(after)}"
    return f"schema migrated from {label(before)} to {label(after)}"


def derived_app_password(owner_dsn: str) -> str:
    # Deterministic, so every stateless replica given the same owner DSN derives the same password.
    return hashlib.sha256(f"pgcontext-app:{owner_dsn}".encode()).hexdigest()[:32]


def app_dsn(owner_dsn: str, password: str | None) -> str:
    """The owner DSN with the user swapped for the RLS-bound service role."""
    parts = urlsplit(owner_dsn)
    host = parts.netloc.rpartition("@")[2]
    user = APP_ROLE if password is None else f"{APP_ROLE}:{quote(password, safe='')}"
    return urlunsplit((parts.scheme, f"{user}@{host}", parts.path, parts.query, parts.fragment))


async def set_app_password(owner_dsn: str, password: str) -> None:
    conn = await asyncpg.connect(owner_dsn)
    try:
        # ALTER ROLE takes no bind parameters; quote_literal makes the value safe.
        literal = await conn.fetchval("SELECT quote_literal($1::text)", password)
        # Instances starting together all set it: concurrent ALTER ROLEs of one role fail with "tuple
        # concurrently updated", so they take turns (the lock ends with the transaction).
        async with conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(hashtext('pgcontext.app_role_password'))")
            await conn.execute(f"ALTER ROLE {APP_ROLE} WITH LOGIN PASSWORD {literal}")
    finally:
        await conn.close()
