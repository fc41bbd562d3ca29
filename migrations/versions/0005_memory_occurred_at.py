"""Event time: ``memories.occurred_at``, when the recorded thing happened or was said.

``created_at`` is when the row was written; a conversation imported a week later, or a fact about
last year, happened earlier. ``occurred_at`` defaults to the write time (``now()``), existing rows
take their ``created_at``. Context assembly's recency uses it; list and search filter on it.

The backfill runs with the lexical update trigger disabled: it re-indexes only rows whose text
changed (none here) but would still copy every row into its transition tables. The index is built
after the backfill, on ``(org_id, agent_id, occurred_at)``: an agent's time range is one index range;
an org-wide range (any agent) is a skip scan over the org's few agent ids (PostgreSQL 18).

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
    op.execute("ALTER TABLE memories ADD COLUMN occurred_at timestamptz")
    op.execute("ALTER TABLE memories DISABLE TRIGGER memories_lex_update")
    op.execute("UPDATE memories SET occurred_at = created_at")
    op.execute("ALTER TABLE memories ENABLE TRIGGER memories_lex_update")
    op.execute("ALTER TABLE memories ALTER COLUMN occurred_at SET DEFAULT now(), "
               "ALTER COLUMN occurred_at SET NOT NULL")
    op.execute("CREATE INDEX memories_org_agent_occurred ON memories (org_id, agent_id, occurred_at DESC, id DESC)")


def downgrade() -> None:
    op.execute("DROP INDEX IF EXISTS memories_org_agent_occurred")
    op.execute("ALTER TABLE memories DROP COLUMN occurred_at")
