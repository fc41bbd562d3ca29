"""Facts that stay true: duplicates merged, changed facts superseded on two clocks, every change kept.

On ``memories`` (nullable columns or constant defaults: no table rewrite):

* ``text_hash`` -- sha256 of the normalized text (``service.memories.facts.normalize``) of a fact written
  since this revision; the write path's exact-duplicate lookup. NULL for messages, document chunks
  and rows written before (their near-duplicate check still covers them).
* ``key`` -- an optional single-valued key (``user.city``). The partial unique index
  ``memories_current_key`` makes the database itself hold at most one current memory per
  (org, agent scope, key): two writers racing on a key cannot both leave theirs current.
* ``valid_until`` -- valid time's end (``occurred_at`` is its start); NULL: still valid.
* ``superseded_by`` / ``superseded_at`` -- the memory that replaced this one and when that was
  recorded (record time). A memory with ``superseded_by`` set is retired: search, list and assembly
  leave it out unless asked (``include_superseded``, ``as_of``).
* ``seen_count`` / ``last_seen_at`` / ``first_occurred_at`` / ``last_occurred_at`` -- reinforcement
  by merged duplicates: how often and when it was written, the event-time range of its sightings.

``memories_hot_candidates`` (0004) now covers only current rows and carries ``valid_until``, so the
hot-set fill stays an index-only scan with the currency filter.

New tenant tables (``org_id`` in every key, RLS ENABLEd + FORCEd with 0001's policies):

* ``memory_events`` -- the append-only history of every memory: created, updated, merged,
  superseded, undone, deleted, consolidated. The service role may insert and read, and delete only
  for erasure (an agent's or a memory's, ``?erase=true``); it cannot update. ``undoes`` is unique
  per org: an event is undone at most once, even by two requests at once.
* ``org_settings`` -- per-org defaults (``on_duplicate``); no row means the service's defaults.
* ``consolidation_jobs`` -- the optional model consolidation's work queue (claimed with ``FOR
  UPDATE SKIP LOCKED``), one job per memory. ``pgcontext_consolidation_due()`` (SECURITY DEFINER)
  tells the worker which orgs have due jobs, and nothing else about them.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-04
"""

from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

NEW_TABLES = ("memory_events", "org_settings", "consolidation_jobs")
KEY_PATTERN = "^[A-Za-z0-9_.:@/-]{1,200}$"
EVENTS = ("created", "updated", "merged", "superseded", "undone", "deleted", "consolidated")

HOT_CANDIDATES_0004 = ("CREATE INDEX memories_hot_candidates ON memories (org_id, agent_id) "
                       "INCLUDE (id, pinned, importance, created_at, expires_at) WHERE source_path IS NULL")
HOT_CANDIDATES = ("CREATE INDEX memories_hot_candidates ON memories (org_id, agent_id) "
                  "INCLUDE (id, pinned, importance, created_at, expires_at, valid_until) "
                  "WHERE source_path IS NULL AND superseded_by IS NULL")


def _policies(table: str) -> None:
    op.execute(f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY")
    op.execute(f"ALTER TABLE {table} FORCE ROW LEVEL SECURITY")
    op.execute(
        f"CREATE POLICY tenant_isolation ON {table} "
        "USING (org_id = NULLIF(current_setting('pgcontext.org_id', true), '')::uuid) "
        "WITH CHECK (org_id = NULLIF(current_setting('pgcontext.org_id', true), '')::uuid)"
    )
    op.execute(
        f"""
        DO $$ BEGIN
            EXECUTE format('CREATE POLICY owner_admin ON {table} TO %I USING (true) WITH CHECK (true)',
                           current_user);
        END $$
        """
    )


def upgrade() -> None:
    op.execute(
        f"""
        ALTER TABLE memories
            ADD COLUMN text_hash bytea,
            ADD COLUMN key text CHECK (key ~ '{KEY_PATTERN}'),
            ADD COLUMN valid_until timestamptz,
            ADD COLUMN superseded_by uuid,
            ADD COLUMN superseded_at timestamptz,
            ADD COLUMN seen_count integer NOT NULL DEFAULT 1 CHECK (seen_count >= 1),
            ADD COLUMN last_seen_at timestamptz,
            ADD COLUMN first_occurred_at timestamptz,
            ADD COLUMN last_occurred_at timestamptz
        """
    )
    op.execute(
        "CREATE UNIQUE INDEX memories_current_key ON memories (org_id, agent_id, key) NULLS NOT DISTINCT "
        "WHERE key IS NOT NULL AND superseded_by IS NULL"
    )
    op.execute(
        "CREATE INDEX memories_key_timeline ON memories (org_id, agent_id, key, occurred_at) WHERE key IS NOT NULL"
    )
    op.execute(
        "CREATE INDEX memories_current_text_hash ON memories (org_id, agent_id, text_hash) "
        "WHERE text_hash IS NOT NULL AND superseded_by IS NULL"
    )
    op.execute("DROP INDEX memories_hot_candidates")
    op.execute(HOT_CANDIDATES)

    op.execute(
        f"""
        CREATE TABLE memory_events (
            org_id      uuid NOT NULL REFERENCES orgs(id) ON DELETE CASCADE,
            id          uuid NOT NULL DEFAULT pgcontext_uuidv7(),
            memory_id   uuid NOT NULL,
            agent_id    text,
            event       text NOT NULL CHECK (event IN ({", ".join(f"'{e}'" for e in EVENTS)})),
            at          timestamptz NOT NULL DEFAULT clock_timestamp(),
            related_id  uuid,
            undoes      uuid,
            detail      jsonb NOT NULL DEFAULT '{{}}'::jsonb CHECK (jsonb_typeof(detail) = 'object'),
            PRIMARY KEY (org_id, id)
        )
        """
    )
    op.execute("CREATE INDEX memory_events_memory ON memory_events (org_id, memory_id, id)")
    op.execute("CREATE INDEX memory_events_agent ON memory_events (org_id, agent_id) WHERE agent_id IS NOT NULL")
    op.execute("CREATE UNIQUE INDEX memory_events_undoes ON memory_events (org_id, undoes) WHERE undoes IS NOT NULL")

    op.execute(
        """
        CREATE TABLE org_settings (
            org_id        uuid PRIMARY KEY REFERENCES orgs(id) ON DELETE CASCADE,
            on_duplicate  text NOT NULL DEFAULT 'merge' CHECK (on_duplicate IN ('merge', 'keep', 'reject')),
            updated_at    timestamptz NOT NULL DEFAULT now()
        )
        """
    )

    op.execute(
        """
        CREATE TABLE consolidation_jobs (
            org_id        uuid NOT NULL REFERENCES orgs(id) ON DELETE CASCADE,
            id            uuid NOT NULL DEFAULT pgcontext_uuidv7(),
            memory_id     uuid NOT NULL,
            candidates    jsonb NOT NULL CHECK (jsonb_typeof(candidates) = 'array'),
            status        text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'running', 'done', 'failed')),
            attempts      integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
            available_at  timestamptz NOT NULL DEFAULT now(),
            lease_until   timestamptz,
            last_error    text,
            decision      jsonb,
            created_at    timestamptz NOT NULL DEFAULT now(),
            finished_at   timestamptz,
            PRIMARY KEY (org_id, id),
            UNIQUE (org_id, memory_id)
        )
        """
    )
    op.execute(
        "CREATE INDEX consolidation_jobs_due ON consolidation_jobs (org_id, available_at) "
        "WHERE status IN ('pending', 'running')"
    )

    for table in NEW_TABLES:
        _policies(table)
    op.execute("GRANT SELECT, INSERT, DELETE ON memory_events TO pgcontext_app")
    op.execute("GRANT SELECT, INSERT, UPDATE ON org_settings TO pgcontext_app")
    op.execute("GRANT SELECT, INSERT, UPDATE, DELETE ON consolidation_jobs TO pgcontext_app")

    op.execute(
        """
        CREATE FUNCTION pgcontext_consolidation_due(p_limit integer)
        RETURNS TABLE (org_id uuid)
        LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp
        AS $$
            SELECT DISTINCT j.org_id FROM consolidation_jobs j
             WHERE j.status IN ('pending', 'running')
               AND j.available_at <= now() AND (j.lease_until IS NULL OR j.lease_until < now())
             LIMIT p_limit
        $$
        """
    )
    op.execute("REVOKE ALL ON FUNCTION pgcontext_consolidation_due(integer) FROM PUBLIC")
    op.execute("GRANT EXECUTE ON FUNCTION pgcontext_consolidation_due(integer) TO pgcontext_app")


def downgrade() -> None:
    op.execute("DROP FUNCTION IF EXISTS pgcontext_consolidation_due(integer)")
    for table in reversed(NEW_TABLES):
        op.execute(f"DROP TABLE IF EXISTS {table}")
    op.execute("DROP INDEX IF EXISTS memories_hot_candidates")
    op.execute("DROP INDEX IF EXISTS memories_current_text_hash")
    op.execute("DROP INDEX IF EXISTS memories_key_timeline")
    op.execute("DROP INDEX IF EXISTS memories_current_key")
    op.execute(
        """
        ALTER TABLE memories
            DROP COLUMN last_occurred_at, DROP COLUMN first_occurred_at, DROP COLUMN last_seen_at,
            DROP COLUMN seen_count, DROP COLUMN superseded_at, DROP COLUMN superseded_by,
            DROP COLUMN valid_until, DROP COLUMN key, DROP COLUMN text_hash
        """
    )
    op.execute(HOT_CANDIDATES_0004)
