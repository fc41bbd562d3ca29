"""A database's schema read from the catalog, in a form two databases can be compared by (no OIDs).

Used to show that the offline script and the online upgrade build the same schema, and that every
downgrade leaves what an upgrade to that revision from empty builds. Columns are compared by name,
not position: a downgrade that re-adds a dropped column can only add it at the end of the table.
"""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg

_OURS = "n.nspname = 'public' AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.objid = {oid} AND d.deptype = 'e')"
_VERSION = "alembic_version"

QUERIES: dict[str, str] = {
    "tables": f"""
        SELECT c.relname, c.relkind::text, c.reloptions::text, c.relrowsecurity, c.relforcerowsecurity,
               c.relacl::text
          FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE {_OURS.format(oid="c.oid")} AND c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f')
           AND c.relname <> '{_VERSION}'""",
    "columns": f"""
        SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,
               pg_get_expr(ad.adbin, ad.adrelid), a.attgenerated::text, a.attidentity::text,
               a.attstorage::text
          FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
          JOIN pg_namespace n ON n.oid = c.relnamespace
          LEFT JOIN pg_attrdef ad ON ad.adrelid = a.attrelid AND ad.adnum = a.attnum
         WHERE {_OURS.format(oid="c.oid")} AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
           AND a.attnum > 0 AND NOT a.attisdropped AND c.relname <> '{_VERSION}'""",
    "indexes": f"""
        SELECT tablename, indexname, indexdef FROM pg_indexes
         WHERE schemaname = 'public' AND tablename <> '{_VERSION}'""",
    "constraints": f"""
        SELECT c.conrelid::regclass::text, c.conname, c.contype::text, pg_get_constraintdef(c.oid)
          FROM pg_constraint c JOIN pg_namespace n ON n.oid = c.connamespace
         WHERE {_OURS.format(oid="c.oid")} AND c.conrelid::regclass::text <> '{_VERSION}'""",
    "policies": """
        SELECT tablename, policyname, permissive, roles::text, cmd, qual, with_check
          FROM pg_policies WHERE schemaname = 'public'""",
    "functions": f"""
        SELECT p.proname, pg_get_function_identity_arguments(p.oid), pg_get_functiondef(p.oid),
               p.proacl::text
          FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
         WHERE {_OURS.format(oid="p.oid")}""",
    "triggers": """
        SELECT t.tgrelid::regclass::text, t.tgname, pg_get_triggerdef(t.oid), t.tgenabled::text
          FROM pg_trigger t WHERE NOT t.tgisinternal""",
    "extensions": "SELECT extname, extversion FROM pg_extension",
    "schema_acl": "SELECT nspacl::text FROM pg_namespace WHERE nspname = 'public'",
    # Privileges taken from PUBLIC (0013), as sets of effective grants: a default ACL and the same
    # grants written out (in whatever order) read alike; a downgrade grants back what the default held.
    "database_acl": """
        SELECT (SELECT array_agg(a::text ORDER BY a::text) FROM unnest(coalesce(datacl, acldefault('d', datdba))) a)
          FROM pg_database WHERE datname = current_database()""",
    "activity_acl": """
        SELECT p.oid::regprocedure::text,
               (SELECT array_agg(a::text ORDER BY a::text)
                  FROM unnest(coalesce(p.proacl, acldefault('f', p.proowner))) a)
          FROM pg_proc p WHERE p.oid IN ('pg_catalog.pg_stat_get_activity(integer)'::regprocedure,
                                          'pg_catalog.pg_stat_get_backend_activity(integer)'::regprocedure)""",
}


async def _version_table(conn: asyncpg.Connection) -> tuple[list[str], str | None]:
    """The recorded revisions and the table's grants. A downgrade to base leaves the table empty (its
    grants then read as the owner's explicit default), a never-migrated database has none: both read
    as no revision and no grants."""
    if not await conn.fetchval(f"SELECT to_regclass('{_VERSION}') IS NOT NULL"):
        return [], None
    rows = [r[0] for r in await conn.fetch(f"SELECT version_num FROM {_VERSION} ORDER BY 1")]
    if not rows:
        return [], None
    acl = await conn.fetchval(f"SELECT relacl::text FROM pg_class WHERE oid = '{_VERSION}'::regclass")
    return rows, acl


async def snapshot(dsn: str) -> dict[str, Any]:
    conn = await asyncpg.connect(dsn)
    try:
        result: dict[str, Any] = {}
        for name, sql in QUERIES.items():
            result[name] = sorted(tuple(str(v) for v in row.values()) for row in await conn.fetch(sql))
        result[_VERSION] = await _version_table(conn)
        return result
    finally:
        await conn.close()


def catalog(dsn: str) -> dict[str, Any]:
    return asyncio.run(snapshot(dsn))


def differences(left: dict[str, Any], right: dict[str, Any]) -> dict[str, Any]:
    """Per catalog part, what only one side has (empty when the schemas are the same)."""
    diff: dict[str, Any] = {}
    for key in left.keys() | right.keys():
        a, b = left.get(key), right.get(key)
        if a == b:
            continue
        if isinstance(a, list) and isinstance(b, list):
            diff[key] = {"only_left": [r for r in a if r not in b], "only_right": [r for r in b if r not in a]}
        else:
            diff[key] = {"left": a, "right": b}
    return diff
