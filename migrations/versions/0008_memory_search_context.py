"""Search context: ``memories.search_context``, text that is searched (BM25) but never packed.

A caller may give a memory the words it needs to be *found* without them being part of what it
*says* (Anthropic's "contextual retrieval"): for a conversation turn, the turn(s) before it ("What
do you do to relax?" for "I'm off to go swimming with the kids"); for a chunk, its document's title.
The lexical branch scores a memory as one BM25F document of two fields: a term's frequency is
``tf + w * ctx_tf`` and the length ``doc_len + w * ctx_len``, ``w`` being
``PGCONTEXT_RETRIEVAL_SEARCH_CONTEXT_WEIGHT`` (0.25) at query time, so the weight can change without
re-indexing. The embedding stays that of ``text`` alone (measured: embedding context + text ranked
the evidence lower than the text's own vector; docs/retrieval.md "Search context").

* ``memories.search_context text`` (NULL: none). Adding a nullable column rewrites nothing.
* ``memory_postings.ctx_tf`` / ``ctx_len`` (0 for rows without context: a constant default, no
  rewrite). A term only in the context has a posting with ``tf`` 0. The impact index is rebuilt to
  include both, so BM25 stays an index-only scan (at 1M memories ~27M postings: minutes, under an
  ACCESS EXCLUSIVE lock on ``memory_postings`` -- writes and lexical searches wait).
* ``memory_lex_stats.ctx_total_len``: the context lengths' sum, for the average length.
* ``memory_lex_shard()``: the df/length counter shard a transaction writes, chosen once per
  transaction among the org's shards no other open transaction holds (``pg_try_advisory_xact_lock``
  on (org, shard), starting at 0002's ``pg_backend_pid() % 8``), so two writers of one org -- a
  memory batch beside a document ingest -- no longer wait on each other's counter rows (in a
  soak, a batch answered 503 after the 5 s statement timeout behind an ingest on the same shard).
  With all eight held it falls back to the pid's shard (and waits, as before).
* ``memory_lex_add`` / ``memory_lex_remove`` take the context tsvectors as a fourth array (default
  NULL, so callers of the three-argument form -- benchmarks/search_latency.py's bulk build -- still
  work); the triggers pass ``to_tsvector('english', search_context)`` and re-index a row when its
  text or its context changed.

Existing rows have no context, so their postings, df counters and stats stay as they are.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-30
"""

import importlib.util
from pathlib import Path
from types import ModuleType

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

SHARDS = 8
NOMINAL_WEIGHT = 0.25
"""Only orders a term's postings (``impact``); queries weigh the context with the setting."""


LEX_SHARD = f"""
    CREATE FUNCTION memory_lex_shard() RETURNS smallint LANGUAGE plpgsql VOLATILE AS $$
    DECLARE
        chosen text := current_setting('pgcontext.lex_shard', true);
        org text := current_setting('pgcontext.org_id', true);
        base integer := pg_backend_pid() % {SHARDS};
    BEGIN
        IF chosen IS NOT NULL AND chosen <> '' THEN
            RETURN chosen::smallint;
        END IF;
        IF org IS NOT NULL AND org <> '' THEN
            FOR i IN 0..{SHARDS - 1} LOOP
                IF pg_try_advisory_xact_lock(hashtext('pgcontext.lex:' || org), (base + i) % {SHARDS}) THEN
                    base := (base + i) % {SHARDS};
                    EXIT;
                END IF;
            END LOOP;
        END IF;
        PERFORM set_config('pgcontext.lex_shard', base::text, true);
        RETURN base;
    END $$
    """


def _counters(sign: str) -> str:
    """df and length counters of the memories in ``m`` (memory_lex_terms rows), added with ``sign``."""
    return f"""
            INSERT INTO memory_term_df AS c (org_id, term, shard, df)
            SELECT org_id, term, memory_lex_shard(), {sign}count(*)
              FROM memory_lex_terms(p_org, p_id, p_tsv, p_ctx)
             GROUP BY 1, 2 ORDER BY 1, 2
            ON CONFLICT (org_id, term, shard) DO UPDATE SET df = c.df + excluded.df;
            INSERT INTO memory_lex_stats AS c (org_id, shard, n_docs, total_len, ctx_total_len)
            SELECT d.org_id, memory_lex_shard(), {sign}count(*),
                   {sign}coalesce(sum((SELECT sum(coalesce(cardinality(l.positions), 1)) FROM unnest(d.tsv) AS l)), 0),
                   {sign}coalesce(sum((SELECT sum(coalesce(cardinality(l.positions), 1)) FROM unnest(d.ctx) AS l)), 0)
              FROM unnest(p_org, p_tsv, p_ctx) AS d(org_id, tsv, ctx)
             GROUP BY 1 ORDER BY 1
            ON CONFLICT (org_id, shard) DO UPDATE
               SET n_docs = c.n_docs + excluded.n_docs, total_len = c.total_len + excluded.total_len,
                   ctx_total_len = c.ctx_total_len + excluded.ctx_total_len;"""


# One row per distinct lexeme of a memory's text or context: both frequencies, both lengths, and the
# impact that orders the term's postings (0002's for rows without context, so theirs is unchanged).
LEX_TERMS = f"""
    CREATE FUNCTION memory_lex_terms(p_org uuid[], p_id uuid[], p_tsv tsvector[], p_ctx tsvector[])
    RETURNS TABLE (org_id uuid, id uuid, term text, tf integer, doc_len integer, ctx_tf integer,
                   ctx_len integer, impact real)
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
        SELECT w.org_id, w.id, w.term, w.tf, w.doc_len, w.ctx_tf, w.ctx_len,
               CASE WHEN w.ctx_len = 0 THEN memory_bm25_impact(w.tf, w.doc_len)
                    ELSE ((w.tf + {NOMINAL_WEIGHT} * w.ctx_tf) * 2.2
                          / (w.tf + {NOMINAL_WEIGHT} * w.ctx_tf
                             + 1.2 * (0.25 + 0.75 * (w.doc_len + {NOMINAL_WEIGHT} * w.ctx_len) / 64.0)))::real END
          FROM (SELECT g.org_id, g.id, g.term, g.tf, g.ctx_tf,
                       (sum(g.tf) OVER m)::integer AS doc_len, (sum(g.ctx_tf) OVER m)::integer AS ctx_len
                  FROM (SELECT d.org_id, d.id, l.term, sum(l.tf)::integer AS tf, sum(l.ctx_tf)::integer AS ctx_tf
                          FROM unnest(p_org, p_id, p_tsv, p_ctx) AS d(org_id, id, tsv, ctx)
                         CROSS JOIN LATERAL (
                               SELECT a.lexeme, coalesce(cardinality(a.positions), 1), 0 FROM unnest(d.tsv) AS a
                               UNION ALL
                               SELECT c.lexeme, 0, coalesce(cardinality(c.positions), 1) FROM unnest(d.ctx) AS c
                         ) AS l(term, tf, ctx_tf)
                         GROUP BY 1, 2, 3) AS g
                WINDOW m AS (PARTITION BY g.org_id, g.id)) AS w
    $$
    """

LEX_ADD = f"""
    CREATE FUNCTION memory_lex_add(p_org uuid[], p_id uuid[], p_tsv tsvector[], p_ctx tsvector[] DEFAULT NULL)
    RETURNS void LANGUAGE sql AS $$
            INSERT INTO memory_postings (org_id, term, memory_id, tf, doc_len, impact, ctx_tf, ctx_len)
            SELECT org_id, term, id, tf, doc_len, impact, ctx_tf, ctx_len
              FROM memory_lex_terms(p_org, p_id, p_tsv, p_ctx);{_counters("")}
    $$
    """

LEX_REMOVE = f"""
    CREATE FUNCTION memory_lex_remove(p_org uuid[], p_id uuid[], p_tsv tsvector[], p_ctx tsvector[] DEFAULT NULL)
    RETURNS void LANGUAGE sql AS $$
            DELETE FROM memory_postings p USING memory_lex_terms(p_org, p_id, p_tsv, p_ctx) AS m
             WHERE p.org_id = m.org_id AND p.term = m.term AND p.memory_id = m.id;{_counters("-")}
    $$
    """


def _trigger_functions() -> list[str]:
    """0002's trigger functions with the context tsvectors passed, re-indexing when either changed."""
    def ctx(alias: str) -> str:
        return (f", array_agg(CASE WHEN {alias}search_context IS NOT NULL "
                f"THEN to_tsvector('english', {alias}search_context) END)")
    changed = "n.text IS DISTINCT FROM o.text OR n.search_context IS DISTINCT FROM o.search_context"
    return [
        f"""
        CREATE OR REPLACE FUNCTION memory_lex_on_insert() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            PERFORM memory_lex_add(array_agg(org_id), array_agg(id), array_agg(tsv){ctx("")})
               FROM new_rows HAVING count(*) > 0;
            RETURN NULL;
        END $$
        """,
        f"""
        CREATE OR REPLACE FUNCTION memory_lex_on_delete() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            PERFORM memory_lex_remove(array_agg(org_id), array_agg(id), array_agg(tsv){ctx("")})
               FROM old_rows HAVING count(*) > 0;
            RETURN NULL;
        END $$
        """,
        f"""
        CREATE OR REPLACE FUNCTION memory_lex_on_update() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            PERFORM memory_lex_remove(array_agg(o.org_id), array_agg(o.id), array_agg(o.tsv){ctx("o.")})
               FROM old_rows o JOIN new_rows n ON n.org_id = o.org_id AND n.id = o.id
              WHERE {changed} HAVING count(*) > 0;
            PERFORM memory_lex_add(array_agg(n.org_id), array_agg(n.id), array_agg(n.tsv){ctx("n.")})
               FROM old_rows o JOIN new_rows n ON n.org_id = o.org_id AND n.id = o.id
              WHERE {changed} HAVING count(*) > 0;
            RETURN NULL;
        END $$
        """,
    ]


def upgrade() -> None:
    op.execute("ALTER TABLE memories ADD COLUMN search_context text")
    op.execute("ALTER TABLE memory_postings ADD COLUMN ctx_tf integer NOT NULL DEFAULT 0, "
               "ADD COLUMN ctx_len integer NOT NULL DEFAULT 0")
    op.execute("ALTER TABLE memory_lex_stats ADD COLUMN ctx_total_len bigint NOT NULL DEFAULT 0")
    op.execute("DROP INDEX memory_postings_impact")
    op.execute("CREATE INDEX memory_postings_impact ON memory_postings (org_id, term, impact DESC) "
               "INCLUDE (memory_id, tf, doc_len, ctx_tf, ctx_len)")
    op.execute(LEX_TERMS)
    op.execute(LEX_SHARD)
    # The triggers' functions first: they then call the four-argument functions created next.
    op.execute("DROP FUNCTION memory_lex_add(uuid[], uuid[], tsvector[])")
    op.execute("DROP FUNCTION memory_lex_remove(uuid[], uuid[], tsvector[])")
    op.execute(LEX_ADD)
    op.execute(LEX_REMOVE)
    for sql in _trigger_functions():
        op.execute(sql)


def _v0002() -> ModuleType:
    path = Path(__file__).with_name("0002_lexical_postings.py")
    spec = importlib.util.spec_from_file_location("pgcontext_migration_0002", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def downgrade() -> None:
    """Back to 0002's functions, byte for byte. Memories with a context are re-indexed from their text
    alone first (clearing the column fires the update trigger), so no context posting is left."""
    old = _v0002()
    op.execute("UPDATE memories SET search_context = NULL WHERE search_context IS NOT NULL")
    op.execute("DROP FUNCTION memory_lex_add(uuid[], uuid[], tsvector[], tsvector[])")
    op.execute("DROP FUNCTION memory_lex_remove(uuid[], uuid[], tsvector[], tsvector[])")
    op.execute("DROP FUNCTION memory_lex_terms(uuid[], uuid[], tsvector[], tsvector[])")
    op.execute("DROP FUNCTION memory_lex_shard()")
    op.execute(old.LEX_ADD)
    op.execute(old.LEX_REMOVE)
    for sql in (old.ON_INSERT, old.ON_DELETE, old.ON_UPDATE):
        op.execute(sql.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1))
    op.execute("DROP INDEX memory_postings_impact")
    op.execute("ALTER TABLE memory_lex_stats DROP COLUMN ctx_total_len")
    op.execute("ALTER TABLE memory_postings DROP COLUMN ctx_tf, DROP COLUMN ctx_len")
    op.execute("CREATE INDEX memory_postings_impact ON memory_postings (org_id, term, impact DESC) "
               "INCLUDE (memory_id, tf, doc_len)")
    op.execute("ALTER TABLE memories DROP COLUMN search_context")
