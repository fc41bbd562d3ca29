"""Documents: one row per ingested file, a per-org index state, trigram/symbol indexes on chunks.

* ``documents (org_id, collection, path)``: the file's content hash, language, line/byte counts, chunk
  counts per level, the embedder that produced its chunks' vectors, caller metadata and the owning
  agent (``agent_id``, null = org-wide). The chunks themselves are rows of ``memories`` with
  ``kind = 'document_chunk'``, ``source_path = path`` and ``metadata->>'collection' = collection``;
  they are replaced together with this row in one transaction.
* ``document_index_state (org_id)``: ``revision`` increments once per committed change (ingest
  request that wrote something, or delete); ``last_indexed_at`` is that commit's time.
* ``pg_trgm`` and two GIN indexes, partial on ``kind = 'document_chunk'``:
  ``(org_id, text gin_trgm_ops)`` serves the ``exact`` lookup (``LIKE``/``ILIKE '%...%'``), and
  ``(org_id, lower(coalesce(metadata->>'symbol', section_title)) gin_trgm_ops)`` on L1 chunks serves
  ``symbol`` lookup (equality, prefix and substring). ``btree_gin`` (0001) lets org_id share the index.
* ``(org_id, level, source_path text_pattern_ops)`` on document chunks serves ``path`` lookup (L0
  rows by path prefix) and the per-file chunk reads.

Both tables carry ``org_id`` first in every key and have RLS ENABLEd + FORCEd with the same
``tenant_isolation`` and ``owner_admin`` policies as 0001.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-29
"""

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

TABLES = ("documents", "document_index_state")
SYMBOL_KEY = "lower(coalesce(metadata->>'symbol', section_title))"


def upgrade() -> None:
    op.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
    op.execute(
        """
        CREATE TABLE documents (
            org_id        uuid NOT NULL REFERENCES orgs(id) ON DELETE CASCADE,
            collection    text NOT NULL DEFAULT 'default' CHECK (length(collection) BETWEEN 1 AND 200),
            path          text NOT NULL CHECK (length(path) BETWEEN 1 AND 1024),
            agent_id      text CHECK (length(agent_id) BETWEEN 1 AND 200),
            content_hash  text NOT NULL CHECK (content_hash ~ '^[0-9a-f]{64}$'),
            language      text NOT NULL,
            line_count    integer NOT NULL CHECK (line_count >= 0),
            byte_count    integer NOT NULL CHECK (byte_count >= 0),
            l0_chunks     integer NOT NULL DEFAULT 0,
            l1_chunks     integer NOT NULL DEFAULT 0,
            l2_chunks     integer NOT NULL DEFAULT 0,
            embedder      text,
            metadata      jsonb NOT NULL DEFAULT '{}'::jsonb CHECK (jsonb_typeof(metadata) = 'object'),
            created_at    timestamptz NOT NULL DEFAULT now(),
            indexed_at    timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (org_id, collection, path)
        )
        """
    )
    op.execute("CREATE INDEX documents_org_language ON documents (org_id, language)")
    op.execute(
        """
        CREATE TABLE document_index_state (
            org_id           uuid NOT NULL REFERENCES orgs(id) ON DELETE CASCADE,
            revision         bigint NOT NULL DEFAULT 0,
            last_indexed_at  timestamptz,
            PRIMARY KEY (org_id)
        )
        """
    )
    op.execute(
        "CREATE INDEX memories_doc_text_trgm ON memories USING gin (org_id, text gin_trgm_ops) "
        "WHERE kind = 'document_chunk'"
    )
    op.execute(
        f"CREATE INDEX memories_doc_symbol_trgm ON memories USING gin (org_id, ({SYMBOL_KEY}) gin_trgm_ops) "
        "WHERE kind = 'document_chunk' AND level = 1"
    )
    op.execute(
        "CREATE INDEX memories_doc_level_path ON memories (org_id, level, source_path text_pattern_ops) "
        "WHERE kind = 'document_chunk'"
    )

    for table in TABLES:
        op.execute(f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY")
        op.execute(f"ALTER TABLE {table} FORCE ROW LEVEL SECURITY")
        op.execute(
            f"CREATE POLICY tenant_isolation ON {table} "
            f"USING (org_id = NULLIF(current_setting('pgcontext.org_id', true), '')::uuid) "
            f"WITH CHECK (org_id = NULLIF(current_setting('pgcontext.org_id', true), '')::uuid)"
        )
        op.execute(
            f"""
            DO $$ BEGIN
                EXECUTE format('CREATE POLICY owner_admin ON {table} TO %I USING (true) WITH CHECK (true)',
                               current_user);
            END $$
            """
        )
        op.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON {table} TO pgcontext_app")


def downgrade() -> None:
    # Chunks stay in memories (they are ordinary rows); only this revision's objects go.
    op.execute("DROP INDEX IF EXISTS memories_doc_level_path")
    op.execute("DROP INDEX IF EXISTS memories_doc_symbol_trgm")
    op.execute("DROP INDEX IF EXISTS memories_doc_text_trgm")
    for table in reversed(TABLES):
        op.execute(f"DROP TABLE IF EXISTS {table}")
    # Another database object may use pg_trgm (it is not ours alone once installed): keep it then.
    op.execute(
        """
        DO $$ BEGIN
            DROP EXTENSION IF EXISTS pg_trgm;
        EXCEPTION WHEN dependent_objects_still_exist THEN
            NULL;
        END $$
        """
    )
