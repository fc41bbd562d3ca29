"""Foundation: orgs, API keys, memories, directives, idempotency keys; the RLS-bound service role.

Every tenant table carries ``org_id`` in its primary and unique keys (so it can be distributed by
``org_id`` with Citus later) and has row-level security ENABLEd and FORCEd with a policy on the
per-transaction setting ``pgcontext.org_id``. The service connects as ``pgcontext_app``, which owns
nothing, is not a superuser and has NOBYPASSRLS. The owner (the role running migrations) gets an
admin policy so the CLI can manage orgs and keys; API-key lookups by the service go through a
SECURITY DEFINER function that answers only for an exact key hash.

Ids are UUIDv7 (time-ordered, so new rows land at the right edge of the primary-key indexes) from
``pgcontext_uuidv7()``: PostgreSQL 18's native ``uuidv7`` where the server has it, else
``pgcontext_uuidv7_portable()``, the same layout in plain SQL (PostgreSQL 16 and 17).

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

TENANT_TABLES = ("orgs", "api_keys", "memories", "directives", "idempotency_keys")

# RFC 9562 UUIDv7, "method 3" like PostgreSQL 18's own: unix time in ms (48 bits), version 7, then 12
# bits of sub-millisecond time (so ids from one session sort in creation order), the variant, and 62
# random bits taken from gen_random_uuid() (whose variant bits are already right).
UUIDV7_PORTABLE = """
    CREATE FUNCTION pgcontext_uuidv7_portable() RETURNS uuid
    LANGUAGE sql VOLATILE PARALLEL SAFE
    AS $fn$
        SELECT encode(substring(int8send(t.us / 1000) FROM 3)
                      || int2send((28672 + mod(t.us, 1000) * 4096 / 1000)::smallint)
                      || substring(uuid_send(gen_random_uuid()) FROM 9),
                      'hex')::uuid
          FROM (SELECT floor(extract(epoch FROM clock_timestamp()) * 1000000)::bigint AS us) AS t
    $fn$
"""
# The native function only exists from PostgreSQL 18; the branch not taken is never parsed.
UUIDV7 = """
    DO $$
    BEGIN
        IF current_setting('server_version_num')::int >= 180000 THEN
            CREATE FUNCTION pgcontext_uuidv7() RETURNS uuid LANGUAGE sql VOLATILE PARALLEL SAFE
            AS $fn$ SELECT uuidv7() $fn$;
        ELSE
            CREATE FUNCTION pgcontext_uuidv7() RETURNS uuid LANGUAGE sql VOLATILE PARALLEL SAFE
            AS $fn$ SELECT pgcontext_uuidv7_portable() $fn$;
        END IF;
    END
    $$
"""


def upgrade() -> None:
    op.execute("CREATE EXTENSION IF NOT EXISTS vector")
    op.execute("CREATE EXTENSION IF NOT EXISTS btree_gin")
    op.execute(
        """
        DO $$
        BEGIN
            IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'pgcontext_app') THEN
                CREATE ROLE pgcontext_app LOGIN NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE NOINHERIT;
            END IF;
        END
        $$
        """
    )
    # The service must never get a generic plan for org-filtered vector / full-text queries
    # (ENVIRONMENT.md: the generic plan sorts a whole org), and JIT only adds latency here.
    op.execute("ALTER ROLE pgcontext_app SET plan_cache_mode = force_custom_plan")
    op.execute("ALTER ROLE pgcontext_app SET jit = off")
    op.execute(UUIDV7_PORTABLE)
    op.execute(UUIDV7)

    op.execute(
        """
        CREATE TABLE orgs (
            id          uuid PRIMARY KEY DEFAULT pgcontext_uuidv7(),
            name        text NOT NULL UNIQUE CHECK (length(name) BETWEEN 1 AND 200),
            created_at  timestamptz NOT NULL DEFAULT now()
        )
        """
    )
    op.execute(
        """
        CREATE TABLE api_keys (
            org_id        uuid NOT NULL REFERENCES orgs(id) ON DELETE CASCADE,
            id            uuid NOT NULL DEFAULT pgcontext_uuidv7(),
            key_hash      bytea NOT NULL UNIQUE,
            prefix        text NOT NULL,
            name          text,
            created_at    timestamptz NOT NULL DEFAULT now(),
            last_used_at  timestamptz,
            revoked_at    timestamptz,
            PRIMARY KEY (org_id, id)
        )
        """
    )
    op.execute(
        """
        CREATE TABLE memories (
            org_id            uuid NOT NULL REFERENCES orgs(id) ON DELETE CASCADE,
            id                uuid NOT NULL DEFAULT pgcontext_uuidv7(),
            agent_id          text CHECK (length(agent_id) BETWEEN 1 AND 200),
            kind              text NOT NULL DEFAULT 'fact' CHECK (kind ~ '^[a-z][a-z0-9_]{0,39}$'),
            text              text NOT NULL CHECK (length(text) > 0),
            embedding         vector(384),
            tsv               tsvector GENERATED ALWAYS AS (to_tsvector('english', text)) STORED,
            metadata          jsonb NOT NULL DEFAULT '{}'::jsonb CHECK (jsonb_typeof(metadata) = 'object'),
            importance        real NOT NULL DEFAULT 0.5 CHECK (importance BETWEEN 0 AND 1),
            usefulness        real NOT NULL DEFAULT 0 CHECK (usefulness BETWEEN -1 AND 1),
            feedback_count    integer NOT NULL DEFAULT 0,
            pinned            boolean NOT NULL DEFAULT false,
            created_at        timestamptz NOT NULL DEFAULT now(),
            updated_at        timestamptz NOT NULL DEFAULT now(),
            last_accessed_at  timestamptz,
            access_count      integer NOT NULL DEFAULT 0,
            expires_at        timestamptz,
            source_path       text,
            line_start        integer CHECK (line_start >= 1),
            line_end          integer,
            section_title     text,
            breadcrumb        text,
            level             smallint CHECK (level IN (0, 1, 2)),
            PRIMARY KEY (org_id, id),
            CHECK (line_end IS NULL OR line_start IS NULL OR line_end >= line_start)
        )
        """
    )
    # 1.5 KB vectors would otherwise be the first thing TOASTed on wide rows; keep them inline.
    op.execute("ALTER TABLE memories ALTER COLUMN embedding SET STORAGE PLAIN")
    op.execute(
        "CREATE INDEX memories_embedding_hnsw ON memories USING hnsw (embedding vector_cosine_ops) "
        "WITH (m = 16, ef_construction = 64)"
    )
    # btree_gin lets one GIN index match org and lexemes together (several-fold faster than tsv alone).
    op.execute("CREATE INDEX memories_org_tsv_gin ON memories USING gin (org_id, tsv)")
    op.execute("CREATE INDEX memories_org_agent_created ON memories (org_id, agent_id, created_at DESC, id DESC)")
    op.execute("CREATE INDEX memories_org_created ON memories (org_id, created_at DESC, id DESC)")
    op.execute("CREATE INDEX memories_metadata_gin ON memories USING gin (metadata jsonb_path_ops)")
    op.execute(
        "CREATE INDEX memories_org_source ON memories (org_id, source_path text_pattern_ops) "
        "WHERE source_path IS NOT NULL"
    )
    op.execute("CREATE INDEX memories_org_expires ON memories (org_id, expires_at) WHERE expires_at IS NOT NULL")

    op.execute(
        """
        CREATE TABLE directives (
            org_id      uuid NOT NULL REFERENCES orgs(id) ON DELETE CASCADE,
            agent_id    text NOT NULL CHECK (length(agent_id) BETWEEN 1 AND 200),
            content     text NOT NULL,
            version     integer NOT NULL DEFAULT 1,
            created_at  timestamptz NOT NULL DEFAULT now(),
            updated_at  timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (org_id, agent_id)
        )
        """
    )
    op.execute(
        """
        CREATE TABLE idempotency_keys (
            org_id        uuid NOT NULL REFERENCES orgs(id) ON DELETE CASCADE,
            key           text NOT NULL,
            request_hash  bytea NOT NULL,
            response      jsonb,
            created_at    timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (org_id, key)
        )
        """
    )

    for table in TENANT_TABLES:
        column = "id" if table == "orgs" else "org_id"
        op.execute(f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY")
        op.execute(f"ALTER TABLE {table} FORCE ROW LEVEL SECURITY")
        # Unset setting -> NULL -> no row matches: forgetting to scope a query returns nothing.
        op.execute(
            f"CREATE POLICY tenant_isolation ON {table} "
            f"USING ({column} = NULLIF(current_setting('pgcontext.org_id', true), '')::uuid) "
            f"WITH CHECK ({column} = NULLIF(current_setting('pgcontext.org_id', true), '')::uuid)"
        )
        # The owner (CLI: create orgs and keys; the key-lookup function) manages across orgs.
        op.execute(
            f"""
            DO $$ BEGIN
                EXECUTE format('CREATE POLICY owner_admin ON {table} TO %I USING (true) WITH CHECK (true)',
                               current_user);
            END $$
            """
        )

    op.execute(
        """
        CREATE FUNCTION pgcontext_resolve_api_key(p_key_hash bytea)
        RETURNS TABLE (org_id uuid, key_id uuid)
        LANGUAGE sql SECURITY DEFINER SET search_path = public, pg_temp
        AS $$
            -- Touch last_used_at at most once a minute so auth is not a write hotspot.
            UPDATE api_keys SET last_used_at = now()
             WHERE key_hash = p_key_hash AND revoked_at IS NULL
               AND (last_used_at IS NULL OR last_used_at < now() - interval '1 minute');
            SELECT k.org_id, k.id FROM api_keys k
             WHERE k.key_hash = p_key_hash AND k.revoked_at IS NULL;
        $$
        """
    )
    op.execute("REVOKE ALL ON FUNCTION pgcontext_resolve_api_key(bytea) FROM PUBLIC")
    op.execute("GRANT EXECUTE ON FUNCTION pgcontext_resolve_api_key(bytea) TO pgcontext_app")

    op.execute("GRANT USAGE ON SCHEMA public TO pgcontext_app")
    op.execute("GRANT SELECT ON orgs TO pgcontext_app")
    op.execute("GRANT SELECT, INSERT, UPDATE, DELETE ON memories, directives, idempotency_keys TO pgcontext_app")


def downgrade() -> None:
    op.execute("DROP FUNCTION IF EXISTS pgcontext_resolve_api_key(bytea)")
    for table in reversed(TENANT_TABLES):
        op.execute(f"DROP TABLE IF EXISTS {table} CASCADE")
    op.execute("DROP FUNCTION IF EXISTS pgcontext_uuidv7()")
    op.execute("DROP FUNCTION IF EXISTS pgcontext_uuidv7_portable()")
    op.execute("REVOKE ALL ON SCHEMA public FROM pgcontext_app")
    # migrations/env.py lets the service role read alembic_version (for `serve --no-migrate`).
    op.execute(
        """
        DO $$ BEGIN
            IF to_regclass('alembic_version') IS NOT NULL
               AND EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'pgcontext_app') THEN
                REVOKE ALL ON alembic_version FROM pgcontext_app;
            END IF;
        END $$
        """
    )
    op.execute(
        """
        DO $$ BEGIN
            DROP ROLE IF EXISTS pgcontext_app;
        EXCEPTION WHEN dependent_objects_still_exist THEN
            -- Roles are cluster-wide: another database still grants to it, so keep it.
            NULL;
        END $$
        """
    )
    op.execute("DROP EXTENSION IF EXISTS btree_gin")
    op.execute("DROP EXTENSION IF EXISTS vector")
