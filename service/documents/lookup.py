"""Exact lookup modes over document chunks: ``exact`` substring, ``path`` glob/prefix, ``symbol`` name.

These are the non-statistical modes of document retrieval, meant to sit beside the lexical (BM25)
and semantic (HNSW) branches of the search endpoint and be fused with them by rank (RRF). Each mode
is one named query over an org-scoped :class:`~service.db.TenantTx` and returns a ranked
``list[LookupHit]`` (best first, ``rank`` 1-based, ``score`` comparable only within one mode).

Public API (all coroutines take the transaction first; every query is scoped to ``tx.org_id`` by the
WHERE clause and by row-level security)::

    await exact(tx, query, *, case_sensitive=False, limit=20, filters=None) -> list[LookupHit]
    await path(tx, pattern, *, limit=20, filters=None) -> list[LookupHit]
    await symbol(tx, name, *, limit=20, filters=None) -> list[LookupHit]
    await nearest(tx, embedding, *, limit=20, filters=None, ef_search=200) -> list[LookupHit]  # mode "semantic"
    await run_mode(tx, mode, query, *, limit=20, filters=None, case_sensitive=False) -> list[LookupHit]
    applicable_modes(query) -> tuple[LookupMode, ...]   # which of exact/path/symbol make sense for a query

``exact``
    Substring match on the chunk text: ``LIKE`` (case-sensitive) or ``ILIKE``, with ``%``, ``_`` and
    ``\\`` escaped, served by the trigram index ``memories_doc_text_trgm`` (effective from 3
    characters). Ranking: L2 chunks first (they are the line-exact units), then a whole-word match
    (``walk_tree`` as a word, not inside ``_walk_tree_x``), then the number of occurrences. A hit at a
    coarser level is dropped when a finer hit of the same file already covers its matched lines (an
    L1 section is returned only for a match that spans an L2 boundary; an L0 summary only when the
    file has no other hit). Score: ``2/1/0`` for L2/L1/L0 + ``0.5`` whole word + ``min(n, 20)/40``.
    A line over the chunk bound is stored as several L2 pieces of that line (cut after whitespace or
    punctuation where it has some): each piece is a hit of its own, on that line, and a match that
    straddles two pieces is in neither (only an L1 section whose text holds it can find it).
``path``
    Glob or prefix over ``source_path``. Without wildcards the pattern matches the path exactly
    (score 1.0), a file whose name equals it (0.9, only for patterns without ``/``), a directory
    prefix ``pattern/...`` (0.8) or a string prefix (0.7). With wildcards: ``**`` any number of
    directories, ``*`` and ``?`` within one segment, ``[abc]``/``[!abc]`` classes; a pattern without
    ``/`` matches the file name at any depth (``*.py``), one with ``/`` the whole path
    (``service/**/*.py``), a trailing ``/`` everything under a directory; glob hits score 0.8. A
    path equal to the pattern read as a plain path also matches and scores 1.0 (0.9 for a file name),
    so a file whose name holds glob characters (``app/[id]/page.tsx``) is found by its path. Shorter
    paths rank first. Returns the L0 (file summary) chunk of each file unless ``filters.levels``
    asks for other levels.
``symbol``
    Symbol names of L1 chunks: the qualified code symbol (``DocumentController.ingest_files``, from
    ``metadata.symbol``) or, for prose, the section title. A leading keyword (``def``, ``class``,
    ``fn``, ...) and trailing ``()`` of the query are ignored. Score: 1.0 exact (the qualified name or
    its last component, case-sensitive), 0.9 exact ignoring case, 0.7 prefix, 0.5 substring; ties go
    to the shorter symbol. Served by the trigram index ``memories_doc_symbol_trgm``.
``nearest``
    Cosine nearest neighbours of a query embedding among document chunks (HNSW with a strict-order
    iterative scan). The search endpoint has its own semantic branch; this one exists for tests and
    benchmarks that need document-only semantic hits in the same hit shape.

:class:`LookupFilters` narrows every mode: ``collection``, ``agent_id`` (exact match on the owner),
``path_prefix`` (literal prefix of ``source_path``) and ``levels``.

Excerpts: the chunk lines around the match (one line of context, at most ``EXCERPT_LINES`` lines),
with ``excerpt_line_start``/``excerpt_line_end`` their file line numbers and ``matched_lines`` the
file lines that contain the match. L0 summaries are generated text, so their excerpt is the
matching summary lines and ``matched_lines`` is empty.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal
from uuid import UUID

import asyncpg
import numpy as np
import numpy.typing as npt
from pgvector import Vector

from service.db import TenantTx
from service.documents.globs import compile_path, escape_like, path_score
from service.documents.languages import split_lines
from service.errors import BadRequest

LookupMode = Literal["exact", "path", "symbol"]
HitMode = Literal["exact", "path", "symbol", "semantic"]
LOOKUP_MODES: Final[tuple[LookupMode, ...]] = ("exact", "path", "symbol")

EXCERPT_LINES: Final = 8
"""Most lines in an excerpt."""
MAX_QUERY_CHARS: Final = 1000
"""Longer lookup queries return no hits (no line of code is that long a substring worth indexing)."""
_CANDIDATE_FACTOR: Final = 3

_KEYWORDS: Final = re.compile(
    r"^(?:def|async\s+def|class|fn|func|function|struct|enum|trait|interface|type|impl|method|module|"
    r"namespace|record|object)\s+")
_IDENTIFIER: Final = re.compile(r"^[A-Za-z_$][\w$]*(?:(?:\.|::|#)[A-Za-z_$][\w$]*)*(?:\(\))?$")
_PATHLIKE: Final = re.compile(r"^[\w.\-/*?\[\]!{}@]+$")
_EXTENSION: Final = re.compile(r"\.[A-Za-z0-9]{1,8}$")


@dataclass(frozen=True, slots=True)
class LookupFilters:
    collections: tuple[str, ...] | None = None
    """Only chunks of these collections (None: any)."""
    agent_id: str | None = None
    """Only chunks owned by this agent (``memories.agent_id`` equal to it)."""
    path_prefix: str | None = None
    """Only chunks whose ``source_path`` starts with this literal text."""
    levels: tuple[int, ...] | None = None
    """Only these levels (0 file summary, 1 section/symbol, 2 chunk); ``symbol`` always uses L1."""


NO_FILTERS: Final = LookupFilters()


@dataclass(frozen=True, slots=True)
class LookupHit:
    """One ranked document chunk found by a mode."""

    id: UUID
    """The chunk's memory id (same id the lexical/semantic branches return: fuse on it)."""
    mode: HitMode
    rank: int
    """1-based position in this mode's list."""
    score: float
    """Mode-specific, higher is better; compare only within one mode (see the module docstring)."""
    path: str
    collection: str | None
    line_start: int
    line_end: int
    level: int
    breadcrumb: str | None
    section_title: str | None
    symbol: str | None
    language: str | None
    agent_id: str | None
    text: str
    excerpt: str
    excerpt_line_start: int
    excerpt_line_end: int
    matched_lines: tuple[int, ...]
    metadata: dict[str, Any]


# --------------------------------------------------------------------------------------- helpers


def _collections(filters: LookupFilters) -> list[str] | None:
    return list(filters.collections) if filters.collections is not None else None


def _levels(filters: LookupFilters) -> list[int] | None:
    return list(filters.levels) if filters.levels is not None else None


def _prefix(filters: LookupFilters) -> str | None:
    return escape_like(filters.path_prefix) + "%" if filters.path_prefix else None


def _window(lines: Sequence[str], matched: Sequence[int]) -> tuple[int, int]:
    """0-based inclusive line window around matched line indexes: one line of context, bounded size."""
    if not matched:
        return 0, min(len(lines), EXCERPT_LINES) - 1
    first = max(matched[0] - 1, 0)
    last = min(max(matched[-1] + 1, first), len(lines) - 1, first + EXCERPT_LINES - 1)
    return first, last


def _hit(row: asyncpg.Record, mode: HitMode, score: float, matched_idx: Sequence[int]) -> LookupHit:
    """Build a hit; ``matched_idx`` are 0-based line indexes within the chunk text."""
    text: str = row["text"]
    lines = split_lines(text) or [""]
    first, last = _window(lines, matched_idx)
    level = int(row["level"])
    meta: dict[str, Any] = row["metadata"] or {}
    start, end = int(row["line_start"]), int(row["line_end"])
    if level == 0:  # generated summary: its lines are not file lines
        matched: tuple[int, ...] = ()
        ex_start, ex_end = start, end
    else:
        ex_start = start + first
        ex_end = min(start + last, end)
        matched = tuple(start + i for i in matched_idx if start + i <= end)
    return LookupHit(
        id=row["id"], mode=mode, rank=0, score=round(score, 6), path=row["source_path"],
        collection=meta.get("collection"), line_start=start, line_end=end, level=level,
        breadcrumb=row["breadcrumb"], section_title=row["section_title"], symbol=meta.get("symbol"),
        language=meta.get("language"), agent_id=row["agent_id"], text=text,
        excerpt="".join(lines[first : last + 1]), excerpt_line_start=ex_start, excerpt_line_end=ex_end,
        matched_lines=matched, metadata=meta)


def _ranked(hits: Sequence[LookupHit], limit: int) -> list[LookupHit]:
    return [dataclasses.replace(h, rank=i) for i, h in enumerate(hits[:limit], start=1)]


MAX_MATCHES_PER_CHUNK: Final = 200
"""``exact`` places at most this many matches of a chunk on its lines: a chunk of minified code can hold
hundreds of matches of a short query (an L1 section, thousands), and only the first lines show anyway."""
_NEWLINE: Final = re.compile("\n")


def _match_lines(text: str, spans: Sequence[tuple[int, int]]) -> list[int]:
    """The 0-based lines ``spans`` cover: the text's line breaks found once, each span placed by bisection
    (linear in the text, not in matches x text)."""
    if not spans:
        return []
    breaks = [m.start() for m in _NEWLINE.finditer(text)]
    found: set[int] = set()
    for begin, stop in spans:
        found.update(range(bisect.bisect_left(breaks, begin), bisect.bisect_left(breaks, max(stop - 1, begin)) + 1))
    return sorted(found)


# ----------------------------------------------------------------------------------------- exact


async def exact(tx: TenantTx, query: str, *, case_sensitive: bool = False, limit: int = 20,
                filters: LookupFilters | None = None) -> list[LookupHit]:
    """Chunks containing ``query`` as a substring (see the module docstring for ranking)."""
    filters = filters or NO_FILTERS
    if not query.strip() or len(query) > MAX_QUERY_CHARS or limit < 1:
        return []
    pattern = "%" + escape_like(query) + "%"
    rows = await tx.fetch("documents.exact_cs" if case_sensitive else "documents.exact_ci", tx.org_id, query,
                          pattern, limit * _CANDIDATE_FACTOR + 10, _collections(filters), filters.agent_id,
                          _prefix(filters), _levels(filters))
    flags = 0 if case_sensitive else re.IGNORECASE
    needle = re.compile(re.escape(query), flags)
    word = re.compile(r"(?<![\w$])" + re.escape(query) + r"(?![\w$])", flags)
    scored: list[tuple[float, int, LookupHit]] = []
    for order, row in enumerate(rows):
        text = row["text"]
        spans = [m.span() for m in itertools.islice(needle.finditer(text), MAX_MATCHES_PER_CHUNK)]
        matched = _match_lines(text, spans)
        level = int(row["level"])
        whole_word = bool(word.search(text))
        score = float(level) + (0.5 if whole_word else 0.0) + min(int(row["occurrences"]), 20) / 40
        scored.append((score, order, _hit(row, "exact", score, matched)))
    scored.sort(key=lambda t: (-t[0], t[1]))
    kept: list[LookupHit] = []
    covered: dict[tuple[str | None, str], list[LookupHit]] = {}  # by file: its collection and path
    for _, _, h in scored:
        same_file = covered.get((h.collection, h.path), [])
        if h.level == 0 and same_file:
            continue
        if h.level == 1 and any(o.level == 2 and set(h.matched_lines) <= set(range(o.line_start, o.line_end + 1))
                                for o in same_file):
            continue
        kept.append(h)
        covered.setdefault((h.collection, h.path), []).append(h)
    return _ranked(kept, limit)


# ------------------------------------------------------------------------------------------ path


async def path(tx: TenantTx, pattern: str, *, limit: int = 20,
               filters: LookupFilters | None = None) -> list[LookupHit]:
    """Files (their L0 chunks, or ``filters.levels``) whose path matches a glob or prefix."""
    filters = filters or NO_FILTERS
    compiled = compile_path(pattern) if len(pattern) <= MAX_QUERY_CHARS else None
    if compiled is None or limit < 1:
        return []
    levels = list(filters.levels) if filters.levels is not None else [0]
    rows = await tx.fetch("documents.path", tx.org_id, compiled.like, compiled.regex, compiled.verbatim,
                          levels, limit * _CANDIDATE_FACTOR + 10, _collections(filters), filters.agent_id,
                          _prefix(filters))
    hits = [_hit(r, "path", path_score(compiled, r["source_path"]), []) for r in rows]
    order = {h.id: i for i, h in enumerate(hits)}
    hits.sort(key=lambda h: (-h.score, order[h.id]))
    return _ranked(hits, limit)


# ---------------------------------------------------------------------------------------- symbol


def normalise_symbol(query: str) -> str:
    """``def walk_tree()`` → ``walk_tree``: drop a leading definition keyword and trailing ``()``."""
    q = query.strip()
    q = _KEYWORDS.sub("", q)
    if q.endswith("()"):
        q = q[:-2]
    return q.strip()


async def symbol(tx: TenantTx, name: str, *, limit: int = 20,
                 filters: LookupFilters | None = None) -> list[LookupHit]:
    """L1 sections whose symbol (or prose section title) equals, starts with or contains ``name``."""
    filters = filters or NO_FILTERS
    q = normalise_symbol(name)
    if not q or len(q) > MAX_QUERY_CHARS or limit < 1:
        return []
    lowered = q.lower()
    rows = await tx.fetch("documents.symbol", tx.org_id, "%" + escape_like(lowered) + "%", q, lowered,
                          escape_like(lowered) + "%", limit, _collections(filters), filters.agent_id, _prefix(filters))
    leaf = re.split(r"::|\.|#", q)[-1]
    finder = re.compile(r"(?<![\w$])" + re.escape(leaf) + r"(?![\w$])", re.IGNORECASE)
    hits = []
    for r in rows:
        text = r["text"]
        m = finder.search(text)
        matched = [text.count("\n", 0, m.start())] if m else []
        hits.append(_hit(r, "symbol", float(r["score"]), matched))
    return _ranked(hits, limit)


# ----------------------------------------------------------------------------------------- nearest


async def nearest(tx: TenantTx, embedding: npt.NDArray[np.float32] | Sequence[float], *, limit: int = 20,
                  filters: LookupFilters | None = None, ef_search: int = 200) -> list[LookupHit]:
    """Document chunks nearest to ``embedding`` (cosine); score = 1 - distance. Mode ``semantic``."""
    filters = filters or NO_FILTERS
    if limit < 1:
        return []
    await tx.set_local({"hnsw.iterative_scan": "strict_order", "hnsw.ef_search": str(max(ef_search, limit))})
    rows = await tx.fetch("documents.nearest", tx.org_id, Vector(np.asarray(embedding, dtype=np.float32)), limit,
                          _collections(filters), filters.agent_id, _prefix(filters), _levels(filters))
    return _ranked([_hit(r, "semantic", float(r["score"]), []) for r in rows], limit)


# ------------------------------------------------------------------------------------------ routing


def applicable_modes(query: str) -> tuple[LookupMode, ...]:
    """Which lookup modes are worth running for ``query`` when the caller names none.

    * ``exact``: any query of 2..``MAX_QUERY_CHARS`` characters (cheap through the trigram index).
    * ``symbol``: an identifier, optionally qualified (``a.b``, ``a::b``, ``a#b``), optionally with a
      leading definition keyword or trailing ``()``.
    * ``path``: no whitespace and either a ``/``, a glob character, or a file extension.
    """
    q = query.strip()
    modes: list[LookupMode] = []
    if 2 <= len(q) <= MAX_QUERY_CHARS:
        modes.append("exact")
    if _IDENTIFIER.match(normalise_symbol(q)):
        modes.append("symbol")
    if q and not any(c.isspace() for c in q) and _PATHLIKE.match(q) and (
            "/" in q or any(c in q for c in "*?[") or _EXTENSION.search(q)) and _valid_glob(q):
        modes.append("path")
    return tuple(modes)


def _valid_glob(query: str) -> bool:
    try:
        compile_path(query)
    except BadRequest:
        return False
    return True


async def run_mode(tx: TenantTx, mode: LookupMode, query: str, *, limit: int = 20,
                 filters: LookupFilters | None = None, case_sensitive: bool = False) -> list[LookupHit]:
    """Run one lookup mode by name (``case_sensitive`` applies to ``exact`` only)."""
    if mode == "exact":
        return await exact(tx, query, case_sensitive=case_sensitive, limit=limit, filters=filters)
    if mode == "path":
        return await path(tx, query, limit=limit, filters=filters)
    if mode == "symbol":
        return await symbol(tx, query, limit=limit, filters=filters)
    raise ValueError(f"unknown lookup mode {mode!r}; expected one of {LOOKUP_MODES}")
