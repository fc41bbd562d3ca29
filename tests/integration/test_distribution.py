"""Citus readiness, read from the migrated catalog: every table is declared distributed (by org_id) or
reference in ``service.db.distribution``, and a distributed table's primary key, unique constraints and
unique indexes and foreign keys all include org_id (Citus refuses them otherwise)."""

from __future__ import annotations

import asyncpg

from service.db.distribution import COLOCATE_WITH, DISTRIBUTED, DISTRIBUTION_COLUMN, REFERENCE, citus_statements

_TABLES = """
    SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') AND c.relname <> 'alembic_version'"""
_COLUMNS = "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = 'public'"
# Primary keys, unique constraints and foreign keys: the referencing columns (conkey) and, for foreign
# keys, the referenced columns (confkey) and table.
_CONSTRAINTS = """
    SELECT con.conrelid::regclass::text AS tbl, con.conname, con.contype::text,
           ARRAY(SELECT a.attname::text FROM unnest(con.conkey) k JOIN pg_attribute a
                   ON a.attrelid = con.conrelid AND a.attnum = k) AS cols,
           con.confrelid::regclass::text AS ref,
           ARRAY(SELECT a.attname::text FROM unnest(con.confkey) k JOIN pg_attribute a
                   ON a.attrelid = con.confrelid AND a.attnum = k) AS ref_cols
      FROM pg_constraint con JOIN pg_namespace n ON n.oid = con.connamespace
     WHERE n.nspname = 'public' AND con.contype IN ('p', 'u', 'f')"""
_UNIQUE_INDEXES = """
    SELECT t.relname AS tbl, i.relname AS idx,
           ARRAY(SELECT a.attname::text FROM unnest(x.indkey) k JOIN pg_attribute a
                   ON a.attrelid = x.indrelid AND a.attnum = k) AS cols
      FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_class t ON t.oid = x.indrelid
      JOIN pg_namespace n ON n.oid = t.relnamespace
     WHERE n.nspname = 'public' AND x.indisunique"""


async def test_every_table_is_declared_and_keys_include_org_id(owner_dsn: str) -> None:
    conn = await asyncpg.connect(owner_dsn)
    try:
        tables = {r["relname"] for r in await conn.fetch(_TABLES)}
        columns = {(r["table_name"], r["column_name"]) for r in await conn.fetch(_COLUMNS)}
        constraints = await conn.fetch(_CONSTRAINTS)
        unique_indexes = await conn.fetch(_UNIQUE_INDEXES)
    finally:
        await conn.close()
    distributed, reference = set(DISTRIBUTED), set(REFERENCE)
    assert not distributed & reference
    assert tables - distributed - reference == set(), "tables in neither list (service/db/distribution.py)"
    assert (distributed | reference) - tables == set(), "declared tables the schema does not have"
    assert COLOCATE_WITH in distributed
    for table in distributed:
        assert (table, DISTRIBUTION_COLUMN) in columns, f"{table} has no {DISTRIBUTION_COLUMN}"
    problems: list[str] = []
    for con in constraints:
        if con["tbl"] not in distributed:
            continue
        if DISTRIBUTION_COLUMN not in con["cols"]:
            problems.append(f"{con['tbl']}.{con['conname']} ({con['contype']}) leaves out {DISTRIBUTION_COLUMN}")
        if con["contype"] == "f":
            # Distributed -> reference (orgs) is allowed; distributed -> distributed must be colocated and
            # match org_id to org_id.
            if con["ref"] in distributed:
                position = list(con["cols"]).index(DISTRIBUTION_COLUMN) if DISTRIBUTION_COLUMN in con["cols"] else -1
                if position < 0 or con["ref_cols"][position] != DISTRIBUTION_COLUMN:
                    problems.append(f"{con['tbl']}.{con['conname']} does not match org_id to org_id")
            elif con["ref"] not in reference:
                problems.append(f"{con['tbl']}.{con['conname']} references undeclared {con['ref']}")
    for index in unique_indexes:
        if index["tbl"] in distributed and DISTRIBUTION_COLUMN not in index["cols"]:
            problems.append(f"unique index {index['idx']} on {index['tbl']} leaves out {DISTRIBUTION_COLUMN}")
    # Reference tables may not point at distributed ones (Citus refuses reference -> distributed keys).
    problems += [f"reference table {con['tbl']}.{con['conname']} references distributed {con['ref']}"
                 for con in constraints if con["contype"] == "f" and con["tbl"] in reference
                 and con["ref"] in distributed]
    assert problems == []


def test_citus_statements_distribute_in_order() -> None:
    statements = citus_statements()
    assert statements[:len(REFERENCE)] == [f"SELECT create_reference_table('{t}')" for t in REFERENCE]
    assert statements[len(REFERENCE)] == (
        "SELECT create_distributed_table('memories', 'org_id', colocate_with => 'none')")
    assert all("colocate_with => 'memories'" in s for s in statements[len(REFERENCE) + 1:])
    assert len(statements) == len(REFERENCE) + len(DISTRIBUTED)
