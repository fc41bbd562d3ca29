"""Conversations: a ``conversations`` table, and messages as memories with first-class columns.

A conversation is appended to through ``POST /v1/conversations/{id}/messages``; each message is a row
of ``memories`` of kind ``message`` (searched like any memory, never merged or rewritten) with:

* ``conversation_id`` (the caller's id, text), ``position`` (1, 2, ... in append order, gapless per
  conversation), ``session_id`` (optional), ``speaker`` (a name) and ``role`` (user, assistant,
  system or tool), ``message_id`` (the caller's id, unique per conversation: a retried append writes
  nothing twice). Nullable columns, added without a rewrite; their CHECK constraints are added
  ``NOT VALID`` and validated afterwards (a scan under SHARE UPDATE EXCLUSIVE: writes go on).
* ``conversations (org_id, id)``: the owning ``agent_id`` (null = org-wide), ``message_count``
  (= the last position: appends lock this row, which orders concurrent appends), creation and last
  append times. Its messages reference it (``ON DELETE CASCADE``), so a deleted conversation takes
  them along. RLS ENABLEd + FORCEd with the same policies as 0001.

Indexes, partial on message rows only (other memories pay nothing for them):
``(org_id, conversation_id, position)`` unique: a conversation's messages in order, a message's
neighbours, the last turns before an append; ``(org_id, conversation_id, message_id)`` unique: the
idempotency of appends; ``(org_id, conversation_id, session_id, position)``: a session's messages.

Messages stay out of hot sets (they reach a context through search, and the recent ones through the
request's history): ``memories_hot_candidates`` is rebuilt with ``conversation_id IS NULL`` in its
predicate, so an agent with long conversations keeps cheap hot-set fills.

Revision ID: 0012
Revises: 0010
Create Date: 2026-12-05
"""

from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

ROLES = ("user", "assistant", "system", "tool")
CHECKS = {
    "memories_message_id_length": "message_id IS NULL OR length(message_id) BETWEEN 1 AND 200",
    "memories_session_id_length": "session_id IS NULL OR length(session_id) BETWEEN 1 AND 200",
    "memories_speaker_length": "speaker IS NULL OR length(speaker) BETWEEN 1 AND 200",
    "memories_role": "role IS NULL OR role IN (" + ", ".join(f"'{r}'" for r in ROLES) + ")",
    "memories_position": "position IS NULL OR position >= 1",
    # A message has its conversation and position together; only messages carry the other fields.
    "memories_message_fields": "(conversation_id IS NULL) = (position IS NULL) AND (conversation_id IS NOT NULL "
                               "OR (message_id IS NULL AND session_id IS NULL AND speaker IS NULL AND role IS NULL))",
    "memories_message_kind": "conversation_id IS NULL OR kind = 'message'",
}
HOT_CANDIDATES = ("CREATE INDEX memories_hot_candidates ON memories (org_id, agent_id) "
                  "INCLUDE (id, pinned, importance, created_at, expires_at, valid_until) "
                  "WHERE source_path IS NULL AND superseded_by IS NULL")
"""0011's hot-set index (current rows only); this revision adds ``conversation_id IS NULL``."""


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE conversations (
            org_id          uuid NOT NULL REFERENCES orgs(id) ON DELETE CASCADE,
            id              text NOT NULL CHECK (length(id) BETWEEN 1 AND 200),
            agent_id        text CHECK (length(agent_id) BETWEEN 1 AND 200),
            message_count   bigint NOT NULL DEFAULT 0 CHECK (message_count >= 0),
            created_at      timestamptz NOT NULL DEFAULT now(),
            updated_at      timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (org_id, id)
        )
        """
    )
    op.execute("CREATE INDEX conversations_org_created ON conversations (org_id, created_at DESC, id DESC)")
    op.execute("CREATE INDEX conversations_org_agent_created ON conversations "
               "(org_id, agent_id, created_at DESC, id DESC)")
    op.execute("ALTER TABLE conversations ENABLE ROW LEVEL SECURITY")
    op.execute("ALTER TABLE conversations FORCE ROW LEVEL SECURITY")
    op.execute(
        "CREATE POLICY tenant_isolation ON conversations "
        "USING (org_id = NULLIF(current_setting('pgcontext.org_id', true), '')::uuid) "
        "WITH CHECK (org_id = NULLIF(current_setting('pgcontext.org_id', true), '')::uuid)"
    )
    op.execute(
        """
        DO $$ BEGIN
            EXECUTE format('CREATE POLICY owner_admin ON conversations TO %I USING (true) WITH CHECK (true)',
                           current_user);
        END $$
        """
    )
    op.execute("GRANT SELECT, INSERT, UPDATE, DELETE ON conversations TO pgcontext_app")

    op.execute("ALTER TABLE memories ADD COLUMN conversation_id text, ADD COLUMN message_id text, "
               "ADD COLUMN session_id text, ADD COLUMN position bigint, ADD COLUMN speaker text, "
               "ADD COLUMN role text")
    for name, check in CHECKS.items():
        op.execute(f"ALTER TABLE memories ADD CONSTRAINT {name} CHECK ({check}) NOT VALID")
    op.execute("ALTER TABLE memories ADD CONSTRAINT memories_conversation_fk FOREIGN KEY (org_id, conversation_id) "
               "REFERENCES conversations (org_id, id) ON DELETE CASCADE NOT VALID")
    for name in (*CHECKS, "memories_conversation_fk"):
        op.execute(f"ALTER TABLE memories VALIDATE CONSTRAINT {name}")
    op.execute("CREATE UNIQUE INDEX memories_conversation_position ON memories (org_id, conversation_id, position) "
               "WHERE conversation_id IS NOT NULL")
    op.execute("CREATE UNIQUE INDEX memories_conversation_message_id ON memories "
               "(org_id, conversation_id, message_id) WHERE message_id IS NOT NULL")
    op.execute("CREATE INDEX memories_conversation_session ON memories "
               "(org_id, conversation_id, session_id, position) WHERE conversation_id IS NOT NULL")
    op.execute("DROP INDEX memories_hot_candidates")
    op.execute(HOT_CANDIDATES + " AND conversation_id IS NULL")


def downgrade() -> None:
    # Messages stay in memories as ordinary rows of kind 'message'; only this revision's objects go.
    op.execute("DROP INDEX IF EXISTS memories_hot_candidates")
    op.execute(HOT_CANDIDATES)
    op.execute("DROP INDEX IF EXISTS memories_conversation_session")
    op.execute("DROP INDEX IF EXISTS memories_conversation_message_id")
    op.execute("DROP INDEX IF EXISTS memories_conversation_position")
    op.execute("ALTER TABLE memories DROP CONSTRAINT IF EXISTS memories_conversation_fk")
    for name in reversed(CHECKS):
        op.execute(f"ALTER TABLE memories DROP CONSTRAINT IF EXISTS {name}")
    op.execute("ALTER TABLE memories DROP COLUMN role, DROP COLUMN speaker, DROP COLUMN position, "
               "DROP COLUMN session_id, DROP COLUMN message_id, DROP COLUMN conversation_id")
    op.execute("DROP TABLE IF EXISTS conversations")
