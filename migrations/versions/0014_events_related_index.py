"""An index of history events by the memory they relate to (``related_id``).

Erasing a memory removes, besides its own history, the events elsewhere that hold its text: the kept
memory's ``merged`` event of an erased duplicate, a model's ``consolidated`` decision about it, and
what was merged into it (followed recursively). Those are found by ``related_id``; without an index
each erasure (each batch of an agent's) read every event of the org.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-05
"""

from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("CREATE INDEX memory_events_related ON memory_events (org_id, related_id) WHERE related_id IS NOT NULL")


def downgrade() -> None:
    op.execute("DROP INDEX memory_events_related")
