"""How the schema distributes on Citus: every table is either distributed by ``org_id`` or a reference table.

Distributed tables all use ``org_id`` as their distribution column and are colocated with
``memories`` (one org's rows of every table live on the same node, so every tenant query, join,
foreign key and posting update stays on one node). Reference tables are small, replicated to every
node, and looked up before an org is known (``api_keys`` by key hash) or referenced by every tenant
table (``orgs``).

``tests/integration/test_distribution.py`` checks the migrated catalog against these lists: a new
table must be added to one of them, and a distributed table's primary key, unique constraints and
indexes and foreign keys must include ``org_id``. docs/scaling.md gives the Citus steps; no Citus
server was run here (there is no Citus build in this environment).
"""

from __future__ import annotations

from typing import Final

DISTRIBUTION_COLUMN: Final = "org_id"
COLOCATE_WITH: Final = "memories"
"""The first distributed table; the others are colocated with it."""

DISTRIBUTED: Final[tuple[str, ...]] = (
    "memories",
    "memory_postings",
    "memory_term_df",
    "memory_lex_stats",
    "memory_access",
    "directives",
    "idempotency_keys",
    "documents",
    "document_index_state",
    "cache_epochs",
    "memory_events",
    "org_settings",
    "consolidation_jobs",
    "conversations",
)
REFERENCE: Final[tuple[str, ...]] = ("orgs", "api_keys")


def citus_statements() -> list[str]:
    """The SQL that distributes a migrated database (run as the owner on the Citus coordinator), in order:
    reference tables first (distributed tables' foreign keys point at ``orgs``), then ``memories``,
    then every other distributed table colocated with it."""
    statements = [f"SELECT create_reference_table('{table}')" for table in REFERENCE]
    for table in DISTRIBUTED:
        colocate = "none" if table == COLOCATE_WITH else COLOCATE_WITH
        statements.append(f"SELECT create_distributed_table('{table}', '{DISTRIBUTION_COLUMN}', "
                          f"colocate_with => '{colocate}')")
    return statements
