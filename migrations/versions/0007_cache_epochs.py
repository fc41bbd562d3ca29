"""Per-org cache epochs: Postgres's record that a Redis entry of the org may be stale.

Directive envelopes and hot sets in Redis are refreshed or invalidated after each committed write.
When Redis cannot be reached at that moment (down, paused, cut off) and later comes back with its
old data, the old entry would be served until its TTL. The writer then bumps its org's row here
(``epoch`` + 1); every cached entry carries the epoch it was built under, and an instance uses an
entry only when that equals the org's current epoch (read from here at most
``PGCONTEXT_REDIS_EPOCH_CHECK_S`` ago), so every instance stops trusting the org's older entries
and rebuilds them from Postgres. The row is written only on such failures: normally it does not
exist (epoch 0). RLS ENABLEd + FORCEd with the same policies as 0001.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-30
"""

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE cache_epochs (
            org_id     uuid PRIMARY KEY REFERENCES orgs(id) ON DELETE CASCADE,
            epoch      bigint NOT NULL DEFAULT 0 CHECK (epoch >= 0),
            bumped_at  timestamptz NOT NULL DEFAULT now()
        )
        """
    )
    op.execute("ALTER TABLE cache_epochs ENABLE ROW LEVEL SECURITY")
    op.execute("ALTER TABLE cache_epochs FORCE ROW LEVEL SECURITY")
    op.execute(
        "CREATE POLICY tenant_isolation ON cache_epochs "
        "USING (org_id = NULLIF(current_setting('pgcontext.org_id', true), '')::uuid) "
        "WITH CHECK (org_id = NULLIF(current_setting('pgcontext.org_id', true), '')::uuid)"
    )
    op.execute(
        """
        DO $$ BEGIN
            EXECUTE format('CREATE POLICY owner_admin ON cache_epochs TO %I USING (true) WITH CHECK (true)',
                           current_user);
        END $$
        """
    )
    op.execute("GRANT SELECT, INSERT, UPDATE ON cache_epochs TO pgcontext_app")


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS cache_epochs")
