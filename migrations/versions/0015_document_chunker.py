"""Which chunking version cut each document (``documents.chunker``).

An ingest skips a file whose content, owner, metadata and embedder are those stored; when a release
changes how files are cut (``service.documents.chunking.CHUNKER_VERSION``), a file cut by an earlier
version is cut again on its next ingest, unchanged or not, and ``pgcontext import`` sends it. Rows from
before this revision count as version 0.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-06
"""

from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A constant default: no table rewrite, whatever the table's size.
    op.execute("ALTER TABLE documents ADD COLUMN chunker smallint NOT NULL DEFAULT 0")


def downgrade() -> None:
    op.execute("ALTER TABLE documents DROP COLUMN chunker")
