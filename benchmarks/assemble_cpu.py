"""CPU cost of ranking and packing one assemble request: ``score_candidates`` and ``pack``, in process.

    python benchmarks/assemble_cpu.py [--iterations 300] [--baseline HEAD] [--seed 7] [--no-embeddings]

Compares the working tree's :mod:`service.assembly.scoring` / :mod:`service.assembly.packing`
with the versions at git revision ``--baseline`` (``git show`` into a temporary directory and
imported from there), in the same run, and **asserts their outputs are identical**: the same
scored candidates (order, tags, lines, token counts, every score component), and for ``pack`` the
same chosen ids in the same order with the same scores and justifications, the same dropped ids,
reasons, details and scores, and the same ``tokens_used``. Score components must agree within
1e-9 (the report gives the largest difference seen, normally 0). ``--baseline`` must name a
revision that still has the old code (after committing, e.g. ``HEAD~1``); ``--baseline none``
times the working tree alone.

Requests look like the service's typical one: ~60 cold + ~16 hot candidates (a few found by both
sides, merged by id; two pinned), texts of one to a few SciFact sentences (~20-120 tokens),
384-dim float32 unit embeddings drawn around a handful of topics (so cosines are spread as with a
real model, not all ~0) on all but a few candidates, three near-duplicate pairs by embedding and
one by words (so ``duplicate`` drops happen), the gpt-4o (o200k_base) token counter, intents in
rotation and a memory budget of ~3,000 tokens, so ~30-45 items are chosen. ``--no-embeddings``
takes every embedding away, so word similarity decides every pair (the packer's other path).

Caching, measured honestly: ``score_candidates`` counts tokens through ``TokenCounter.count``
(an LRU per counter) and content terms through an LRU; the packer's word features are cached
too. Each implementation gets its **own** counter (same tiktoken encoding, separate LRU) and its
own module-level caches, and two passes are timed:

* ``fresh`` — every request has texts (and ids, hence tags) never seen before: all caches miss;
  tokenization (tiktoken) is then most of ``score_candidates``.
* ``repeat`` — each request timed right after an untimed run of the same request: every cache
  hits, as for memories that recur between requests (hot memories, popular cold ones). This is
  the part of the cost these two modules control.

Old and new alternate per request (which goes first alternates too), so drift on a shared machine
hits both. Per call: p50/p95/p99 in ms and calls/s (1 / mean).
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import importlib.util
import json
import math
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
from numpy.typing import NDArray

from service.assembly import packing, scoring
from service.assembly.intent import Intent
from service.assembly.scoring import Candidate
from service.settings import load_settings
from service.text.tokens import TokenCounter, Tokenizers

ROOT = Path(__file__).resolve().parent.parent
CORPUS = Path("/work/shared/data/scifact/corpus.jsonl")
DIM = 384
NOW = datetime(2026, 9, 1, 12, 0, tzinfo=UTC)
BUDGET_TOKENS = 3_000
INTENTS = (Intent.FACTUAL, Intent.CONCEPTUAL, Intent.DETAILED, Intent.COMPLEX)
SCORE_FIELDS = ("relevance", "recency", "usefulness", "informativeness", "uniqueness", "composite")


# -- the code under test: working tree and baseline ------------------------------------------------


@dataclass(frozen=True)
class Impl:
    name: str
    scoring: ModuleType
    packing: ModuleType


def load_baseline(rev: str, workdir: Path) -> Impl:
    """The scoring and packing modules as of ``rev`` (with the terms, redundancy and justify modules
    they import, where ``rev`` has them), imported under private module names."""
    parts = ("terms", "redundancy", "scoring", "justify", "packing")  # each imports only the ones before it
    names = {part: f"_baseline_assembly_{part}" for part in parts}
    modules: dict[str, ModuleType] = {}
    for part in parts:
        shown = subprocess.run(["git", "show", f"{rev}:service/assembly/{part}.py"], cwd=ROOT, capture_output=True,
                               text=True)
        if shown.returncode != 0:
            if part in ("terms", "redundancy", "justify"):
                continue  # before they were split out of scoring.py (and packing.py)
            shown.check_returncode()
        source = shown.stdout
        for other in parts:
            source = source.replace(f"from service.assembly.{other} import", f"from {names[other]} import")
        path = workdir / f"{names[part]}.py"
        path.write_text(source)
        spec = importlib.util.spec_from_file_location(names[part], path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[names[part]] = module
        spec.loader.exec_module(module)
        modules[part] = module
    return Impl(f"baseline ({rev})", modules["scoring"], modules["packing"])


# -- requests ----------------------------------------------------------------------------------------


def text_pool(limit: int, seed: int) -> list[str]:
    """Distinct texts of one or more adjacent SciFact sentences, 15-90 words (~20-120 tokens): from
    each sentence on, as many following ones as it takes to reach a length drawn for it."""
    rng = np.random.default_rng(seed)
    texts: list[str] = []
    seen: set[str] = set()
    with CORPUS.open() as f:
        for line in f:
            sentences = [s.strip() for s in re.split(r"(?<=[.!?])\s+(?=[A-Z])", json.loads(line)["text"])]
            for start in range(len(sentences)):
                target, end = int(rng.integers(15, 90)), start + 1
                while end < len(sentences) and sum(len(s.split()) for s in sentences[start:end]) < target:
                    end += 1
                text = " ".join(sentences[start:end])
                if 15 <= len(text.split()) <= 90 and text not in seen:
                    seen.add(text)
                    texts.append(text)
    rng.shuffle(texts)
    return texts[:limit]


@dataclass(frozen=True)
class Request:
    candidates: list[Candidate]
    intent: Intent


def _unit(v: NDArray[np.floating]) -> NDArray[np.float32]:
    unit: NDArray[np.float32] = (v / np.linalg.norm(v)).astype(np.float32)
    return unit


def make_request(
    rng: np.random.Generator, texts: list[str], serial: int, intent: Intent, *, embeddings: bool = True
) -> Request:
    """~60 cold + ~16 hot candidates; ``texts`` supplies 73 distinct texts for this request.
    ``embeddings=False``: none has an embedding (words decide every similarity)."""
    topics = rng.normal(size=(6, DIM))

    def embedding() -> np.ndarray:
        return _unit(0.55 * _unit(topics[rng.integers(6)]) + 0.45 * _unit(rng.normal(size=DIM)))

    def near(vector: np.ndarray) -> np.ndarray:
        return _unit(vector + 0.12 * _unit(rng.normal(size=DIM)))

    def created() -> datetime:
        return NOW - timedelta(hours=float(rng.exponential(24 * 30)))

    def feedback() -> float:
        return float(rng.choice([0.0, 0.0, 0.0, 0.4, -0.5, 0.8]))

    pool = iter(texts)
    cold: list[Candidate] = []
    raw = sorted((float(rng.random()) for _ in range(60)), reverse=True)
    rrf = [1 / (60 + rank) * (0.6 + 0.4 * r) for rank, r in enumerate(raw, start=1)]
    top = max(rrf)
    for rank, score in enumerate(rrf, start=1):
        text = next(pool)
        emb: np.ndarray | None = embedding()
        if rank in (7, 19, 33):  # three near-duplicate pairs by embedding: the twin is the next one
            pass
        elif rank in (8, 20, 34):
            twin = cold[-1]
            text = "In short, " + twin.text[0].lower() + twin.text[1:]
            assert twin.embedding is not None
            emb = near(twin.embedding)
        elif rank in (12, 41, 52):  # a few without an embedding: words decide for them
            emb = None
        elif rank == 53:  # and one near-duplicate pair by words
            text = cold[-1].text.rstrip(".") + " as reported."
            emb = None
        if rank > 56:  # the tail: stale, barely relevant, unhelpful (some end below the threshold)
            score *= 0.05
        cold.append(
            Candidate(
                id=f"{serial:06x}{rank:02x}-cold-{rng.integers(1 << 30):08x}",
                text=text,
                origin="cold",
                relevance=score / top,
                created_at=created() if rank <= 56 else NOW - timedelta(days=1000),
                last_accessed_at=NOW - timedelta(hours=float(rng.exponential(48))) if rng.random() < 0.3 else None,
                importance=float(rng.random()) if rank <= 56 else 0.05,
                usefulness=feedback() if rank <= 56 else -0.8,
                embedding=emb,
                pinned=False,
                rank=rank,
            )
        )
    hot: list[Candidate] = []
    sims = sorted((float(rng.beta(4, 3)) for _ in range(16)), reverse=True)
    for rank, sim in enumerate(sims, start=1):
        if rank in (3, 9, 14):  # also found by cold search: merged by id
            twin = cold[int(rng.integers(len(cold)))]
            base_id, text, emb = twin.id, twin.text, twin.embedding
        else:
            base_id, text, emb = f"{serial:06x}{rank:02x}-hot-{rng.integers(1 << 30):08x}", next(pool), embedding()
        hot.append(
            Candidate(
                id=base_id,
                text=text,
                origin="hot",
                relevance=sim,
                created_at=created(),
                last_accessed_at=NOW - timedelta(minutes=float(rng.exponential(90))),
                importance=float(rng.random()),
                usefulness=feedback(),
                embedding=emb,
                pinned=rank in (5, 11),
                rank=rank,
            )
        )
    # The orchestrator offers hot candidates first, then cold ones.
    candidates = hot + cold
    if not embeddings:
        candidates = [dataclasses.replace(c, embedding=None) for c in candidates]
    return Request(candidates, intent)


# -- identical outputs -------------------------------------------------------------------------------


class Mismatch(AssertionError):
    pass


def _scores_diff(a: Any, b: Any, where: str) -> float:
    worst = 0.0
    for f in SCORE_FIELDS:
        x, y = getattr(a, f), getattr(b, f)
        diff = abs(x - y)
        if not diff <= 1e-9:
            raise Mismatch(f"{where}: {f} {x!r} != {y!r}")
        worst = max(worst, diff)
    return worst


def compare_scored(old: Sequence[Any], new: Sequence[Any]) -> float:
    if [s.id for s in old] != [s.id for s in new]:
        raise Mismatch("score_candidates: different order")
    worst = 0.0
    for a, b in zip(old, new, strict=True):
        for f in (
            "body",
            "tokens",
            "text_tokens",
            "content_terms",
            "age_hours",
            "access_age_hours",
            "recency_from_access",
        ):
            if getattr(a, f) != getattr(b, f):
                raise Mismatch(f"score_candidates [{a.id}]: {f} {getattr(a, f)!r} != {getattr(b, f)!r}")
        if (a.unit_embedding is None) != (b.unit_embedding is None) or (
            a.unit_embedding is not None and not np.array_equal(a.unit_embedding, b.unit_embedding)
        ):
            raise Mismatch(f"score_candidates [{a.id}]: unit embeddings differ")
        if a.candidate.pinned != b.candidate.pinned or a.candidate.in_hot_and_cold != b.candidate.in_hot_and_cold:
            raise Mismatch(f"score_candidates [{a.id}]: merged candidates differ")
        worst = max(worst, _scores_diff(a.scores, b.scores, f"score_candidates [{a.id}]"))
    return worst


def compare_packed(old: Any, new: Any) -> float:
    if [p.id for p in old.chosen] != [p.id for p in new.chosen]:
        raise Mismatch(f"pack: chosen {[p.id for p in old.chosen]} != {[p.id for p in new.chosen]}")
    if [(d.id, d.reason) for d in old.dropped] != [(d.id, d.reason) for d in new.dropped]:
        raise Mismatch("pack: dropped ids/reasons differ")
    for f in ("tokens_used", "budget_tokens", "section_overhead", "candidates_evaluated"):
        if getattr(old, f) != getattr(new, f):
            raise Mismatch(f"pack: {f} {getattr(old, f)} != {getattr(new, f)}")
    worst = 0.0
    for a, b in zip(old.chosen, new.chosen, strict=True):
        if (a.tag, a.formatted, a.tokens, a.justification) != (b.tag, b.formatted, b.tokens, b.justification):
            raise Mismatch(f"pack chosen [{a.id}]: {a.justification!r} != {b.justification!r}")
        worst = max(worst, _scores_diff(a.scores, b.scores, f"pack chosen [{a.id}]"))
    for a, b in zip(old.dropped, new.dropped, strict=True):
        if (a.detail, a.tokens) != (b.detail, b.tokens):
            raise Mismatch(f"pack dropped [{a.id}]: {a.detail!r} != {b.detail!r}")
        worst = max(worst, _scores_diff(a.scores, b.scores, f"pack dropped [{a.id}]"))
    return worst


# -- timing ------------------------------------------------------------------------------------------


@dataclass
class Timings:
    score: list[float]
    pack: list[float]


def run_once(impl: Impl, counter: TokenCounter, req: Request, timings: Timings) -> tuple[Any, Any]:
    t0 = time.perf_counter()
    scored = impl.scoring.score_candidates(req.candidates, intent=req.intent, counter=counter, now=NOW)
    t1 = time.perf_counter()
    result = impl.packing.pack(scored, budget_tokens=BUDGET_TOKENS, intent=req.intent, counter=counter)
    t2 = time.perf_counter()
    timings.score.append((t1 - t0) * 1e3)
    timings.pack.append((t2 - t1) * 1e3)
    return scored, result


def summary(samples: list[float]) -> str:
    q = statistics.quantiles(samples, n=100, method="inclusive")
    return (
        f"p50 {statistics.median(samples):7.3f}  p95 {q[94]:7.3f}  p99 {q[98]:7.3f} ms"
        f"  {1e3 / statistics.fmean(samples):8.0f} calls/s"
    )


def timed_pass(
    label: str,
    impls: Sequence[Impl],
    counters: Sequence[TokenCounter],
    requests: Sequence[Request],
    check: Callable[[list[tuple[Any, Any]]], None],
    *,
    warm: bool,
) -> dict[str, Timings]:
    """One timed call per implementation and request; ``warm``: each preceded by an untimed one."""
    timings = {impl.name: Timings([], []) for impl in impls}
    untimed = Timings([], [])
    gc.collect()
    for n, req in enumerate(requests):
        order = list(range(len(impls)))
        if n % 2:
            order.reverse()
        outputs: list[tuple[Any, Any]] = [(None, None)] * len(impls)
        for k in order:
            if warm:
                run_once(impls[k], counters[k], req, untimed)
            outputs[k] = run_once(impls[k], counters[k], req, timings[impls[k].name])
        check(outputs)
    print(f"\n{label} ({len(requests)} requests)")
    for impl in impls:
        t = timings[impl.name]
        print(f"  {impl.name:<22} score_candidates  {summary(t.score)}")
        print(f"  {'':<22} pack              {summary(t.pack)}")
    if len(impls) == 2:
        base, new = (timings[i.name] for i in impls)
        for what, a, b in (("score_candidates", base.score, new.score), ("pack", base.pack, new.pack)):
            print(
                f"  speed-up {what:<17} p50 x{statistics.median(a) / statistics.median(b):.2f}"
                f"  mean x{statistics.fmean(a) / statistics.fmean(b):.2f}"
            )
    return timings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iterations", type=int, default=300, help="requests per pass (default 300)")
    parser.add_argument("--baseline", default="HEAD", help="git revision to compare with, or 'none' (default HEAD)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--no-embeddings", action="store_true", help="no candidate has an embedding: words decide every similarity"
    )
    args = parser.parse_args()

    settings = load_settings()
    tiktoken_dir = settings.assembly.tiktoken_dir or settings.data_dir / "tiktoken"
    rng = np.random.default_rng(args.seed)
    per_request = 73
    texts = text_pool(args.iterations * per_request, args.seed)
    if len(texts) < args.iterations * per_request:
        raise SystemExit(f"only {len(texts)} distinct texts: at most {len(texts) // per_request} iterations")
    requests = [
        make_request(
            rng,
            texts[n * per_request : (n + 1) * per_request],
            n,
            INTENTS[n % len(INTENTS)],
            embeddings=not args.no_embeddings,
        )
        for n in range(args.iterations)
    ]

    with tempfile.TemporaryDirectory(prefix="assemble-cpu-") as tmp:
        impls: list[Impl] = []
        if args.baseline.lower() != "none":
            impls.append(load_baseline(args.baseline, Path(tmp)))
        impls.append(Impl("working tree", scoring, packing))
        # One counter (hence one LRU) each, so neither implementation warms the other's cache.
        counters = [Tokenizers(tiktoken_dir).for_model("gpt-4o") for _ in impls]

        stats = {"chosen": 0, "dropped": 0, "duplicate": 0, "below_threshold": 0, "over_budget": 0, "words": 0}
        worst = [0.0]

        def check(outputs: list[tuple[Any, Any]]) -> None:
            scored, result = outputs[-1]
            stats["chosen"] += len(result.chosen)
            stats["dropped"] += len(result.dropped)
            for d in result.dropped:
                stats[d.reason] = stats.get(d.reason, 0) + 1
            stats["words"] += sum(1 for s in scored if s.unit_embedding is None)
            if len(outputs) == 2:
                (old_scored, old_result), (new_scored, new_result) = outputs
                worst[0] = max(worst[0], compare_scored(old_scored, new_scored), compare_packed(old_result, new_result))

        print(
            f"{len(requests)} requests, {sum(len(r.candidates) for r in requests) / len(requests):.0f} candidates "
            f"each (before merging by id), gpt-4o ({counters[0].encoding_name}), budget {BUDGET_TOKENS} tokens; "
            f"numpy {np.__version__}, Python {sys.version.split()[0]}"
        )
        timed_pass("fresh: every text, id and tag new (all caches miss)", impls, counters, requests, check, warm=False)
        n = len(requests)
        print(
            f"  per request: {stats['chosen'] / n:.1f} chosen, {stats['dropped'] / n:.1f} dropped "
            f"({stats['duplicate'] / n:.1f} duplicate, {stats['below_threshold'] / n:.1f} below_threshold, "
            f"{stats['over_budget'] / n:.1f} over_budget), {stats['words'] / n:.1f} without embedding"
        )
        timed_pass(
            "repeat: each request right after the same one (token counts, terms, word features cached)",
            impls,
            counters,
            requests,
            check,
            warm=True,
        )
        if len(impls) == 2:
            print(
                f"\nidentical outputs: yes, {2 * n} request pairs compared "
                f"(largest score difference {worst[0]:.3g}; tolerance 1e-9)"
            )
        assert not math.isnan(worst[0])


if __name__ == "__main__":
    main()
