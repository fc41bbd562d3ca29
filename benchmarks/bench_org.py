"""The benchmark org: memory-sized texts cut from the SciFact corpus, their vectors, the claims sent as
queries, the ``pgcontext serve`` subprocess under test and the loader (memories, directives, a
vacuum). Shared by the load benchmarks (assemble_load, overload, soak, bulk_writes, noisy_neighbour,
scale_out) and lexical_cap; see ``benchmarks/assemble_load.py`` for how the org is made."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import re
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import httpx
import numpy as np
import numpy.typing as npt

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._common import (  # noqa: E402
    KEEP,
    cached_embeddings,
    running_embedded_dsn,
    stop_service,
    vacuum_loaded,
    wait_ready,
)
from service.embedded.postgres import free_port  # noqa: E402

SCIFACT = ROOT.parent / "shared" / "data" / "scifact"
CACHE_DIR = ROOT / ".pgcontext" / "bench-cache"
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z(])")
BATCH = 256


# -- corpus and embeddings -------------------------------------------------------------------------


def corpus_pieces(corpus: Path) -> Iterator[tuple[str, str]]:
    """(document id, memory-sized text) in :func:`build_texts`'s order: every document's sentences,
    then the titles, then runs of 2, 3, ... adjacent sentences; texts cut to 600 characters."""
    docs: list[tuple[str, str, list[str]]] = []
    with corpus.open() as f:
        for line in f:
            doc = json.loads(line)
            sentences = [s.strip() for s in _SENTENCE_END.split(doc.get("text") or "") if len(s.strip()) >= 20]
            docs.append((str(doc["_id"]), (doc.get("title") or "").strip(), sentences))
    for doc_id, _, sentences in docs:
        for s in sentences:
            yield doc_id, s[:600]
    for doc_id, title, _ in docs:
        if len(title) >= 20:
            yield doc_id, title[:600]
    for run in range(2, 8):
        for doc_id, _, sentences in docs:
            for i in range(len(sentences) - run + 1):
                yield doc_id, " ".join(sentences[i : i + run])[:600]


def build_texts(corpus: Path, n: int) -> list[str]:
    """``n`` distinct memory-sized texts: sentences, then titles, then runs of 2, 3, ... sentences."""
    seen: set[str] = set()
    out: list[str] = []
    for _, text in corpus_pieces(corpus):
        if text and text not in seen:
            seen.add(text)
            out.append(text)
            if len(out) >= n:
                return out
    raise SystemExit(f"{corpus} yields only {len(out)} distinct texts, fewer than {n}")


def embeddings_for(texts: Sequence[str]) -> npt.NDArray[np.float32]:
    """The service embedder's vectors for ``texts``, cached on disk by content hash and model."""
    from service.settings import load_settings

    return cached_embeddings(load_settings(), texts, CACHE_DIR, "assemble")


def random_vectors(n: int, dim: int = 384) -> npt.NDArray[np.float32]:
    """Dry runs only (``--random-vectors``): unit vectors without the model. Never for reported numbers."""
    vectors = np.random.default_rng(7).normal(size=(n, dim)).astype(np.float32)
    return np.asarray(vectors / np.linalg.norm(vectors, axis=1, keepdims=True), dtype=np.float32)


FRESH_SUFFIXES = ("", " ?", " !")
"""``--fresh-queries``: each claim three times, as it is and ending in " ?" and " !". Postgres's text
search drops the punctuation (the lexical branch's work is the claim's), the model reads it (another
vector), so the 2,427 queries a level cycles through in order never repeat within the service's
query-embedding cache (an LRU of 1,024 by default): every assembly embeds its query."""


def add_fresh_queries_flag(parser: argparse.ArgumentParser) -> None:
    """``--fresh-queries`` for every load benchmark that sends :func:`load_queries`'s claims."""
    parser.add_argument("--fresh-queries", action="store_true",
                        help="every assembly's query new to the query-embedding cache (FRESH_SUFFIXES); by "
                             "default the 809 claims repeat, and once each has been sent its embedding is cached")


def load_queries(root: Path, *, fresh: bool = False) -> list[str]:
    with (root / "queries.jsonl").open() as f:
        claims = [json.loads(line)["text"] for line in f]
    return [claim + suffix for suffix in FRESH_SUFFIXES for claim in claims] if fresh else claims


# -- the service under test ------------------------------------------------------------------------


@contextlib.contextmanager
def service(data_dir: Path, port: int, workers: int = 1, *, source: Path = ROOT,
            env_extra: dict[str, str] | None = None,
            deadline_ms: int | None = None) -> Iterator[tuple[str, str | None]]:
    """``pgcontext serve`` on the embedded default in ``data_dir``; yields (url, first-start key or None).

    ``source``: the project checkout whose ``service`` package runs (another one measures old code
    against this tree in the same run, on the same data directory); ``env_extra``: more
    ``PGCONTEXT_*`` settings for the service; ``deadline_ms``: its ``PGCONTEXT_DEADLINE_MS``."""
    from service.settings import load_settings

    data_dir.mkdir(parents=True, exist_ok=True)
    shared = load_settings().data_dir
    for cache in ("models", "tiktoken"):  # reuse the built model / BPE files instead of rebuilding them
        target = data_dir / cache
        if (shared / cache).is_dir() and not target.exists():
            target.symlink_to((shared / cache).resolve(), target_is_directory=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PGCONTEXT_")}
    env.update({"PGCONTEXT_DATA_DIR": str(data_dir), "PGCONTEXT_PORT": str(port), "PGCONTEXT_WORKERS": str(workers),
                "PGCONTEXT_SQL_DIR": str(source / "sql"), "PYTHONPATH": str(source)})
    # One org at full speed is what this benchmark measures: no per-org limit unless asked for.
    env["PGCONTEXT_RATE_LIMIT_RPS"] = os.environ.get("PGCONTEXT_RATE_LIMIT_RPS", "0")
    env["PGCONTEXT_RATE_LIMIT_MAX_IN_FLIGHT"] = os.environ.get("PGCONTEXT_RATE_LIMIT_MAX_IN_FLIGHT", "0")
    if deadline_ms is not None:
        env["PGCONTEXT_DEADLINE_MS"] = str(deadline_ms)
    env.update(env_extra or {})
    log_path = data_dir / "service.log"
    with log_path.open("ab") as log_file:
        proc = subprocess.Popen([sys.executable, "-m", "service.cli", "serve", "--port", str(port)], cwd=source,
                                env=env, stdout=subprocess.PIPE, stderr=log_file, text=True)
        try:
            assert proc.stdout is not None
            key: str | None = None
            for line in proc.stdout:  # "Created org ...", the key, then "pgcontext serving on ..."
                if line.startswith("pgc_"):
                    key = line.strip()
                if line.startswith("pgcontext serving on"):
                    break
            else:
                raise SystemExit(f"the service exited early; see {log_path}")
            url = f"http://127.0.0.1:{port}"
            wait_ready(url, proc, log_path, timeout_s=120, name="the service", poll_s=0.2)
            yield url, key
        finally:
            stop_service(proc)


def agent_of(i: int, agents: int, org_wide_every: int) -> str | None:
    return None if i % org_wide_every == 0 else f"agent-{i % agents}"


async def load_org(url: str, headers: dict[str, str], texts: Sequence[str], vectors: npt.NDArray[np.float32],
                   agents: int, org_wide_every: int) -> float:
    """POST every memory (vectors given, batches of 256, two requests in flight); returns seconds."""
    started = time.perf_counter()
    rng = random.Random(11)
    batches = [range(s, min(s + BATCH, len(texts))) for s in range(0, len(texts), BATCH)]
    queue: asyncio.Queue[range] = asyncio.Queue()
    for batch in batches:
        queue.put_nowait(batch)
    done = 0

    async def worker(http: httpx.AsyncClient) -> None:
        nonlocal done
        while not queue.empty():
            batch = queue.get_nowait()
            body = {"on_duplicate": KEEP, "memories": [
                {"text": texts[i], "agent_id": agent_of(i, agents, org_wide_every), "embedding": vectors[i].tolist(),
                 "importance": round(rng.random(), 2), "pinned": i % 997 == 0,
                 "kind": "fact" if i % 3 else "episode"} for i in batch]}
            r = await http.post("/v1/memories", json=body)
            for _ in range(3):  # a loaded machine: a batch (one transaction) may hit its statement_timeout
                if r.status_code != 503:
                    break
                await asyncio.sleep(1)
                r = await http.post("/v1/memories", json=body)
            if r.status_code != 201:
                raise SystemExit(f"load failed: {r.status_code} {r.text[:300]}")
            done += len(batch)
            if done % (BATCH * 40) < BATCH:
                print(f"  loaded {done}/{len(texts)} ({done / (time.perf_counter() - started):.0f}/s)",
                      file=sys.stderr, flush=True)

    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=300) as http:
        await asyncio.gather(*(worker(http) for _ in range(2)))
    return time.perf_counter() - started


def scifact_train(root: Path) -> dict[str, set[str]]:
    relevant: dict[str, set[str]] = {}
    with (root / "qrels" / "train.tsv").open() as f:
        for line in f:
            parts = line.strip().split("\t")
            if len(parts) == 3 and parts[2].isdigit() and int(parts[2]) > 0:
                relevant.setdefault(parts[0], set()).add(parts[1])
    return relevant


def prepare_org(data_dir: Path, memories: int, agents: int, org_wide_every: int, scifact: Path,
                random: bool, *, workers: int = 1) -> str:
    """The API key of the benchmark org in ``data_dir``, loading it first (memories and one directive
    per agent, then a vacuum) unless a previous run left one of that size there. The loading service
    stops before this returns: started on loaded data, this tree's service would migrate and secure it
    before a ``--compare-root`` of an older schema is measured on it."""
    marker = data_dir / "bench-org.json"
    loaded = json.loads(marker.read_text()) if marker.exists() else None
    if loaded is not None and loaded["memories"] == memories:
        return str(loaded["key"])
    with service(data_dir, free_port(), workers) as (url, key):
        if key is None:
            raise SystemExit(f"{data_dir} holds an org from another run; use a fresh --data-dir")
        texts = build_texts(scifact / "corpus.jsonl", memories)
        vectors = random_vectors(len(texts)) if random else embeddings_for(texts)
        headers = {"Authorization": f"Bearer {key}"}
        seconds = asyncio.run(load_org(url, headers, texts, vectors, agents, org_wide_every))
        print(f"# loaded {len(texts)} memories in {seconds:.0f} s ({len(texts) / seconds:.0f}/s)", flush=True)

        async def directives() -> None:
            async with httpx.AsyncClient(base_url=url, headers=headers) as http:
                for a in range(agents):
                    await http.put(f"/v1/agents/agent-{a}/directive", json={
                        "content": f"You are research assistant {a}. Cite the memories you use by tag."})

        asyncio.run(directives())
        asyncio.run(vacuum_loaded(running_embedded_dsn(data_dir)))  # steady state, not a load's last minute
    marker.write_text(json.dumps({"memories": memories, "key": key}))
    return key
