"""BM25 bookkeeping in one pass: a batch's terms computed once, its counter shard chosen once.

0008's ``memory_lex_add`` / ``memory_lex_remove`` (run by the statement-level triggers on every
write) were three statements each: the postings, the df counters and the length statistics. The
first two each called ``memory_lex_terms`` -- unnest every tsvector of the batch (text and
context), group by term, sum the lengths -- so every write computed it twice, and the df insert
called the VOLATILE ``memory_lex_shard()`` once per distinct term. Loading 100,000 memories with
their vectors through the API ran at ~680/s at 0008 against ~870-1,000/s at 0004.

Here the postings insert (or delete) and the df counters are one statement over one materialized
``memory_lex_terms`` result, with the shard read once; the statistics statement is unchanged.
Same rows, same counters: only the work to produce them changes. The signatures are 0008's, so
the triggers are untouched.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01
"""

import importlib.util
from pathlib import Path
from types import ModuleType

from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def _stats(sign: str) -> str:
    """0008's length-statistics statement (unchanged)."""
    return f"""
            INSERT INTO memory_lex_stats AS c (org_id, shard, n_docs, total_len, ctx_total_len)
            SELECT d.org_id, memory_lex_shard(), {sign}count(*),
                   {sign}coalesce(sum((SELECT sum(coalesce(cardinality(l.positions), 1)) FROM unnest(d.tsv) AS l)), 0),
                   {sign}coalesce(sum((SELECT sum(coalesce(cardinality(l.positions), 1)) FROM unnest(d.ctx) AS l)), 0)
              FROM unnest(p_org, p_tsv, p_ctx) AS d(org_id, tsv, ctx)
             GROUP BY 1 ORDER BY 1
            ON CONFLICT (org_id, shard) DO UPDATE
               SET n_docs = c.n_docs + excluded.n_docs, total_len = c.total_len + excluded.total_len,
                   ctx_total_len = c.ctx_total_len + excluded.ctx_total_len;"""


def _df(sign: str) -> str:
    """The df counters of the terms in ``t``, on the shard in ``s``."""
    return f"""
            INSERT INTO memory_term_df AS c (org_id, term, shard, df)
            SELECT t.org_id, t.term, s.shard, {sign}count(*)
              FROM t CROSS JOIN s
             GROUP BY 1, 2, 3 ORDER BY 1, 2
            ON CONFLICT (org_id, term, shard) DO UPDATE SET df = c.df + excluded.df;"""


TERMS = """
            WITH t AS MATERIALIZED (SELECT * FROM memory_lex_terms(p_org, p_id, p_tsv, p_ctx)),
                 s AS MATERIALIZED (SELECT memory_lex_shard() AS shard),"""

ADD_COUNTERS = _df("") + _stats("")
REMOVE_COUNTERS = _df("-") + _stats("-")

LEX_ADD = f"""
    CREATE OR REPLACE FUNCTION memory_lex_add(p_org uuid[], p_id uuid[], p_tsv tsvector[],
                                              p_ctx tsvector[] DEFAULT NULL)
    RETURNS void LANGUAGE sql AS $${TERMS}
                 posted AS (INSERT INTO memory_postings (org_id, term, memory_id, tf, doc_len, impact, ctx_tf, ctx_len)
                            SELECT org_id, term, id, tf, doc_len, impact, ctx_tf, ctx_len FROM t){ADD_COUNTERS}
    $$
    """

LEX_REMOVE = f"""
    CREATE OR REPLACE FUNCTION memory_lex_remove(p_org uuid[], p_id uuid[], p_tsv tsvector[],
                                                 p_ctx tsvector[] DEFAULT NULL)
    RETURNS void LANGUAGE sql AS $${TERMS}
                 removed AS (DELETE FROM memory_postings p USING t
                              WHERE p.org_id = t.org_id AND p.term = t.term AND p.memory_id = t.id){REMOVE_COUNTERS}
    $$
    """


def _v0008() -> ModuleType:
    path = Path(__file__).with_name("0008_memory_search_context.py")
    spec = importlib.util.spec_from_file_location("pgcontext_migration_0008", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def upgrade() -> None:
    op.execute(LEX_ADD)
    op.execute(LEX_REMOVE)


def downgrade() -> None:
    """0008's functions, byte for byte (same signatures: the triggers keep calling them)."""
    old = _v0008()
    op.execute(old.LEX_ADD.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1))
    op.execute(old.LEX_REMOVE.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1))
