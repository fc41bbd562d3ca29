"""A deleted directive leaves its agent's version behind (``directives.content`` NULL), so versions go on.

A directive's version named its text: the directive cache keeps an envelope only for a newer version
(``service.directives.store``), and the assembly reports the version it used. When a delete removed
the row, the agent's next directive started again at version 1, so a version named two texts and a
read-through that found the deleted text could cache it over the new one (and serve it until the
next write). Now a delete keeps the row and its version with its text removed (``content`` NULL);
the agent's next directive takes the version after it. Reads, exports and counts leave such rows
out; an org's deletion takes them with it.

Dropping ``NOT NULL`` changes only the catalog (no table rewrite). The downgrade removes the deleted
directives' rows and sets ``NOT NULL`` again.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-06
"""

from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE directives ALTER COLUMN content DROP NOT NULL")


def downgrade() -> None:
    op.execute("DELETE FROM directives WHERE content IS NULL")
    op.execute("ALTER TABLE directives ALTER COLUMN content SET NOT NULL")
