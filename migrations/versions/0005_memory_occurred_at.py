"""Event time: ``memories.occurred_at``, when the recorded thing happened or was said.

``created_at`` is when the row was written; a conversation imported a week later, or a fact about
last year, happened earlier. ``occurred_at`` defaults to the write time (``now()``), existing rows
take their ``created_at``. Context assembly's recency uses it; list and search filter on it.

The backfill is one table rewrite, not an ``UPDATE``: the column is added with its default (no
rewrite), then ``ALTER COLUMN ... TYPE timestamptz USING created_at`` rewrites every row with its
creation time and rebuilds the indexes in bulk. An ``UPDATE`` of every row would insert each new row
version into every index, the HNSW graph included, one by one, fire the lexical trigger and leave
the table half dead tuples: on 20,000 memories with embeddings (2 shared cores) the ``UPDATE`` took
142 s and the rewrite 20 s. The rewrite holds an ACCESS EXCLUSIVE lock on ``memories`` while it
runs (reads wait too); at 1M rows expect minutes (the HNSW build dominates: ~400 s, ENVIRONMENT.md).

A rewritten table starts with an empty visibility map, and nothing in it counts as a change for
autovacuum: until enough later writes woke it, index-only scans read the heap for every row, and the
planner stopped choosing them (an agent's hot-set fill at 100K memories: 77 ms through a plain index
scan, 36 ms once vacuumed). So the migration ends with ``VACUUM (ANALYZE) memories``, outside its
transaction (a few seconds at 100K rows; it takes no lock that blocks reads or writes).

The index ``(org_id, agent_id, occurred_at)`` is built after the rewrite: an agent's time range is
one index range; an org-wide range (any agent) is a skip scan over the org's agent ids
(PostgreSQL 18; measured on 100,000 rows over 5 agents: 11 index searches, 0.9 ms).

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30
"""

from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE memories ADD COLUMN occurred_at timestamptz NOT NULL DEFAULT now()")
    op.execute("ALTER TABLE memories ALTER COLUMN occurred_at TYPE timestamptz USING created_at")
    op.execute("CREATE INDEX memories_org_agent_occurred ON memories (org_id, agent_id, occurred_at DESC, id DESC)")
    with op.get_context().autocommit_block():  # VACUUM cannot run inside a transaction
        op.execute("VACUUM (ANALYZE) memories")


def downgrade() -> None:
    op.execute("DROP INDEX IF EXISTS memories_org_agent_occurred")
    op.execute("ALTER TABLE memories DROP COLUMN occurred_at")
