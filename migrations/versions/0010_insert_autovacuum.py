"""Autovacuum after 1% new rows on ``memories`` and ``memory_postings``, not 20%: fresh visibility maps.

BM25 reads each query term's best postings with an index-only scan of ``memory_postings_impact``.
Postings on a heap page not yet marked all-visible cost a heap visit each, and only a vacuum marks
pages. Appended rows wake autovacuum after ``autovacuum_vacuum_insert_threshold`` (1,000) plus
``autovacuum_vacuum_insert_scale_factor`` (0.2) times the table's rows, so by default up to a sixth
of a growing table's pages are not all-visible. Measured on 2 shared cores, with the assembly's
lexical query (500 postings per term, 200 SciFact claims, one at a time):

- 117,000 memories, 15% of the postings pages not all-visible (17,000 memories added since the last
  vacuum, under the default threshold): 3.3 ms per query;
- the same table vacuumed: 2.5-2.7 ms;
- 100,000 memories with 48% not all-visible (a benchmark database whose statistics had been reset,
  so autovacuum never saw the inserts): 5.3 ms, against 2.7 ms vacuumed.

Here both tables are vacuumed after 1% new rows: at 100,000 memories about every 1,000 memories
written. Such a vacuum reads only the pages not yet all-visible, and with no dead rows it skips the
index passes. ``memories`` gets the same for its own index-only scans (an agent's hot-set fill at
100,000 memories took 77 ms through the heap and 36 ms vacuumed, see 0005). Storage parameters only:
no rewrite and no lock beyond a brief SHARE UPDATE EXCLUSIVE.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-03
"""

from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

TABLES = ("memories", "memory_postings")
INSERT_SCALE_FACTOR = 0.01


def upgrade() -> None:
    for table in TABLES:
        op.execute(f"ALTER TABLE {table} SET (autovacuum_vacuum_insert_scale_factor = {INSERT_SCALE_FACTOR})")


def downgrade() -> None:
    for table in TABLES:
        op.execute(f"ALTER TABLE {table} RESET (autovacuum_vacuum_insert_scale_factor)")
