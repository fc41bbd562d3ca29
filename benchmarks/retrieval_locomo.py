"""Retrieval and context assembly on conversations (LoCoMo-style), through the service's HTTP API.

    python benchmarks/retrieval_locomo.py ../shared/data/locomo-dev [--categories 1 2 3 4]
    python benchmarks/retrieval_locomo.py DIR --load memories [--context-turns 0 --plain]

DIR holds three files:

* ``corpus.jsonl``: one turn per line (``_id``, ``text``, ``metadata``). ``metadata.sample_id`` names
  the conversation: each gets its own org, so a question only ever sees its own conversation.
  ``metadata.session_date_time`` (e.g. ``1:56 pm on 8 May, 2023``) is when the turn was said.

  ``--load conversations`` (the default) writes each conversation the way any client can: through
  ``POST /v1/conversations/{id}/messages``, in file order, each turn with only what a client has —
  the words as said (a leading ``Name: `` moves into the ``speaker`` field), ``speaker``
  (``metadata.speaker``), ``occurred_at`` and ``session_id`` (``metadata.session``), its ``_id`` as
  ``message_id``. No metadata, no search context: the service derives what a search needs.

  ``--load memories`` writes the turns as memories (``POST /v1/memories``), as before conversations
  existed: the text as in the file, the metadata as the memory's (its ``speaker`` is what ``auto``
  search uses when a question names them, docs/retrieval.md "Speakers"), ``occurred_at``, and the
  ``--context-turns`` turns before it in the file, of the same conversation and session, as its
  ``search_context`` (what the harness once supplied by hand). ``--plain`` sends only the text and
  ``occurred_at`` (no metadata), as a plain client would.
* ``queries.jsonl``: ``_id``, ``text``, ``metadata.sample_id`` and ``metadata.category``.
* ``qrels.tsv``: header line, then ``query-id  corpus-id  score`` (evidence turns).

It prints one line per search strategy (Recall@10 and binary nDCG@10, overall, per category and per conversation,
engine latency), an in-process BM25 reference (bm25s per conversation, Porter stemmer, k1 0.9,
b 0.4), then one line per assembly budget: the share of evidence turns whose memory is in
``memories_used``, the mean context tokens, and the share of those tokens spent on the reference
tags that open each memory line (``[...]`` or the number ``n``), counted with tiktoken.

Every assembly line starts from the loaded state: the orgs' access statistics (what earlier lines
packed, as "recently used") are cleared before it, so a line's figures do not depend on which lines
ran before it; within a line, earlier questions' packed memories count as recently used for later
ones, as in a service in use.
Turns are written org-wide (no agent) so the assembling agent sees them all; assembly runs with no
directive, no history, ``reserve_tokens`` 0 and the hot set off (``--use-hot`` turns it on; it
would otherwise fill with whatever earlier questions touched, making results order-dependent).
Unless PGCONTEXT_DEADLINE_MS is set, assembly deadlines are relaxed so that quality does not
depend on how busy the machine is (latency has its own benchmarks).
With no PGCONTEXT_DATABASE_URL / DATABASE_URL it starts embedded Postgres and Redis in a temp dir.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import re
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import asyncpg
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import (
    SEARCH_STRATEGIES,
    app_client,
    ndcg_at,
    new_tenant,
    percentile,
    recall_at,
    servers,
)
from benchmarks.locomo_data import (
    FIRST_PERSON,
    SECOND_PERSON,
    Query,
    Turn,
    append_group,
    as_followups,
    in_person,
    load_dir,
    load_group,
    one_speaker_questions,
    with_context,
)
from service.logs import configure as configure_logs
from service.retrieval import RetrievalEngine
from service.settings import load_settings
from service.text.tokens import Tokenizers

K = 10
AGENT = "locomo-bench"
MODEL = "gpt-4o"
RELAXED_DEADLINES = {"PGCONTEXT_DEADLINE_MS": "5000", "PGCONTEXT_ASSEMBLY_DIRECTIVE_TIMEOUT_MS": "1000",
                     "PGCONTEXT_ASSEMBLY_HOT_TIMEOUT_MS": "1000"}
# name -> request fields besides agent, query and model
ASSEMBLIES: dict[str, dict[str, Any]] = {
    "assemble_500": {"max_context_tokens": 500},
    "assemble_1000": {"max_context_tokens": 1000},
    "assemble_2000": {"max_context_tokens": 2000},
    "assemble_selective": {"selective": True},
}
_ASSEMBLY_NAME = re.compile(r"assemble_(\d+)")
"""Any ``assemble_N`` runs with ``max_context_tokens`` N (e.g. ``assemble_1500`` for a trade-off curve)."""
_TAG = re.compile(r"\[[^\]\n]*\]|\d+(?= )")
"""A memory line's tag: ``[...]`` (ids, before), or the number that opens it (``1 text``)."""


def assembly_fields(name: str) -> dict[str, Any]:
    """The request fields of an assembly line: a named one, or ``assemble_N`` at N tokens."""
    if name in ASSEMBLIES:
        return ASSEMBLIES[name]
    if (m := _ASSEMBLY_NAME.fullmatch(name)) and int(m.group(1)) > 0:
        return {"max_context_tokens": int(m.group(1))}
    raise argparse.ArgumentTypeError(f"{name!r}: give one of {', '.join(ASSEMBLIES)} or assemble_N (N tokens)")


def assembly_name(name: str) -> str:
    assembly_fields(name)
    return name


def by_category(queries: Sequence[Query], values: Sequence[float]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for q, v in zip(queries, values, strict=True):
        out.setdefault(q.category, []).append(v)
    return dict(sorted(out.items()))


def by_conversation(queries: Sequence[Query], values: Sequence[float]) -> str:
    """Mean of ``values`` per conversation: one conversation should not carry the overall figure."""
    out: dict[str, list[float]] = {}
    for q, v in zip(queries, values, strict=True):
        out.setdefault(q.group, []).append(v)
    return "  ".join(f"{group} {np.mean(vs):.3f}" for group, vs in sorted(out.items()))


def quality_line(name: str, queries: Sequence[Query], recall: Sequence[float], ndcg: Sequence[float],
                 tail: str) -> str:
    recall_cat, ndcg_cat = by_category(queries, recall), by_category(queries, ndcg)
    cats = "  ".join(f"c{c} {np.mean(recall_cat[c]):.3f}/{np.mean(ndcg_cat[c]):.3f} (n={len(recall_cat[c])})"
                     for c in recall_cat)
    return (f"{name:<20} R@{K}={np.mean(recall):.4f}  nDCG@{K}={np.mean(ndcg):.4f}  "
            f"by category R@{K}/nDCG@{K}: {cats}  by conversation R@{K}: {by_conversation(queries, recall)}  {tail}")


def bm25_reference(turns: Sequence[Turn], queries: Sequence[Query], qrels: dict[str, dict[str, int]]) -> str:
    """bm25s per conversation: Porter stemmer, English stop words, k1 0.9, b 0.4."""
    import bm25s
    import Stemmer

    stemmer = Stemmer.Stemmer("porter")
    recall: list[float] = []
    ndcg: list[float] = []
    scored: list[Query] = []
    for group in sorted({t.group for t in turns}):
        docs = [t for t in turns if t.group == group]
        asked = [q for q in queries if q.group == group]
        if not asked:
            continue
        retriever = bm25s.BM25(k1=0.9, b=0.4)
        retriever.index(bm25s.tokenize([t.text for t in docs], stopwords="en", stemmer=stemmer, show_progress=False),
                        show_progress=False)
        tokens = bm25s.tokenize([q.text for q in asked], stopwords="en", stemmer=stemmer, show_progress=False)
        results, _scores = retriever.retrieve(tokens, k=min(K, len(docs)), show_progress=False, n_threads=1)
        for q, row in zip(asked, results, strict=True):
            ranked = [docs[i].id for i in row]
            recall.append(recall_at(ranked, qrels[q.id], K))
            ndcg.append(ndcg_at(ranked, qrels[q.id], K))
            scored.append(q)
    return quality_line("bm25s (reference)", scored, recall, ndcg, "(in-process, Porter, stop words en, k1 0.9 b 0.4)")


async def run_strategy(client: Any, name: str, queries: Sequence[Query], qrels: dict[str, dict[str, int]],
                       orgs: dict[str, tuple[dict[str, str], dict[str, str]]]) -> str:
    strategy, tuning = SEARCH_STRATEGIES[name]
    engine = client.app.state.services.extras["retrieval"]
    assert isinstance(engine, RetrievalEngine)
    engine.cache.clear()  # every strategy pays for its own query embeddings
    recall, ndcg, engine_ms = [], [], []
    used: dict[str, int] = {}
    for q in queries:
        headers, by_memory = orgs[q.group]
        r = await client.post("/v1/memories/search", headers=headers,
                              json={"query": q.text, "strategy": strategy, "limit": K, "tuning": tuning})
        r.raise_for_status()
        body = r.json()
        used[body["strategy"]] = used.get(body["strategy"], 0) + 1
        ranked = [by_memory[x["id"]] for x in body["results"]]
        recall.append(recall_at(ranked, qrels[q.id], K))
        ndcg.append(ndcg_at(ranked, qrels[q.id], K))
        engine_ms.append(body["metrics"]["total_ms"])
    mix = ", ".join(f"{k} {v}" for k, v in sorted(used.items()))
    return quality_line(name, queries, recall, ndcg,
                        f"p50={percentile(engine_ms, 50):.1f} ms p95={percentile(engine_ms, 95):.1f} ms (used: {mix})")


def tag_tokens(context: str, count: Any) -> int:
    """Tokens of the tag opening every memory line (``[...]`` or ``n``) in the context's memories section."""
    inside, total = False, 0
    for line in context.split("\n"):
        if line.startswith("<memories>"):
            inside = True
        elif line.startswith("</memories>"):
            inside = False
        elif inside and (m := _TAG.match(line)):
            total += int(count(m.group(0)))
    return total


async def forget_accesses(client: Any, owner_dsn: str, org_ids: Sequence[str]) -> None:
    """Clear the orgs' access statistics (after writing what the service still holds), so that an
    assembly line starts from the loaded state: the memories an earlier line packed for the same
    questions would otherwise count as recently used, and each line would score higher the more lines
    ran before it (``assemble_1000`` after ``assemble_500``: +0.012 of evidence on LoCoMo dev)."""
    # The app (its pool included) runs on the test client's portal loop, not this one: flush there.
    await asyncio.to_thread(client.blocking_portal.call, client.app.state.services.extras["assembly"].access.flush)
    conn = await asyncpg.connect(owner_dsn)
    try:
        await conn.execute("DELETE FROM memory_access WHERE org_id = ANY($1::uuid[])", list(org_ids))
    finally:
        await conn.close()


async def run_assembly(client: Any, name: str, queries: Sequence[Query], qrels: dict[str, dict[str, int]],
                       orgs: dict[str, tuple[dict[str, str], dict[str, str]]], tokenizers: Tokenizers,
                       use_hot: bool, history: dict[str, list[dict[str, str]]] | None = None,
                       complete: bool = True, label: str | None = None) -> str:
    """One assembly line; ``history``: each question's ``recent_messages`` (by question id), ``complete``:
    ``retrieval.complete_from_history``."""
    evidence: dict[str, list[int]] = {}  # category -> [evidence turns in context, evidence turns]
    per_group: dict[str, list[int]] = {}  # conversation -> [evidence turns in context, evidence turns]
    context_tokens: list[int] = []
    tags: list[int] = []
    levels: dict[str, int] = {}
    engine_ms: list[float] = []
    for q in queries:
        headers, by_memory = orgs[q.group]
        body = {"agent_id": AGENT, "query": q.text, "model": MODEL, "reserve_tokens": 0,
                "retrieval": {"use_hot": use_hot, "complete_from_history": complete}, **assembly_fields(name)}
        if history is not None:
            body["recent_messages"] = history[q.id]
        r = await client.post("/v1/context/assemble", headers=headers, json=body)
        r.raise_for_status()
        out = r.json()
        counter = tokenizers.get(out["budget"]["encoding"])
        used = {by_memory.get(m["id"]) for m in out["memories_used"]}
        wanted = set(qrels[q.id])
        counts = evidence.setdefault(q.category, [0, 0])
        counts[0] += len(wanted & used)
        counts[1] += len(wanted)
        group = per_group.setdefault(q.group, [0, 0])
        group[0] += len(wanted & used)
        group[1] += len(wanted)
        n = counter.count(out["context"])
        context_tokens.append(n)
        tags.append(tag_tokens(out["context"], counter.count))
        levels[out["degradation_level"]] = levels.get(out["degradation_level"], 0) + 1
        engine_ms.append(out["metrics"]["total_ms"])
    cats = "  ".join(f"c{c} {found / wanted:.3f}" for c, (found, wanted) in sorted(evidence.items()))
    convs = "  ".join(f"{g} {found / wanted:.3f}" for g, (found, wanted) in sorted(per_group.items()))
    found_total, wanted_total = (sum(c[i] for c in evidence.values()) for i in (0, 1))
    mix = ", ".join(f"{k} {v}" for k, v in sorted(levels.items()))
    share = sum(tags) / max(sum(context_tokens), 1)
    return (f"{label or name:<20} evidence_in_context={found_total / max(wanted_total, 1):.4f}  "
            f"by category: {cats}  by conversation: {convs}  mean_context_tokens={np.mean(context_tokens):.1f}  "
            f"tag_token_share={share:.4f}  p50={percentile(engine_ms, 50):.1f} ms (levels: {mix})")


async def main_async(args: argparse.Namespace) -> None:
    env = dict(os.environ)
    if "PGCONTEXT_DEADLINE_MS" not in env:
        env.update(RELAXED_DEADLINES)
    settings = load_settings(env)
    root = Path(args.dir)
    turns, queries, qrels = load_dir(root, set(args.categories) if args.categories else None)
    turns = with_context(turns, args.context_turns)
    if args.max_queries:
        queries = queries[: args.max_queries]
    groups = sorted({t.group for t in turns})
    dated = sum(t.occurred_at is not None for t in turns)
    print(f"# {root.name}: {len(turns)} turns in {len(groups)} conversations ({dated} with a parsed date), "
          f"{len(queries)} questions (categories {', '.join(args.categories) or 'all'})", flush=True)
    # (the org's name, its conversation, the speaker written as the user)
    loads: list[tuple[str, str, str | None]] = [(group, group, None) for group in groups]
    person = SECOND_PERSON if args.to_assistant else FIRST_PERSON if args.as_user else None
    if person is not None:
        asked = one_speaker_questions(queries, turns, person)
        queries = [Query(q.id, q.text, f"{q.group} as {name}", q.category) for q, name in asked]
        loads = sorted({(f"{q.group} as {name}", q.group, name) for q, name in asked})
        role, other, how = (("assistant", "user", "of them in the second person") if person is SECOND_PERSON else
                            ("user", "assistant", "by them in the first person"))
        example = in_person("What activities does Melanie partake in?", "Melanie", person)
        print(f"# as the {role}: {len(queries)} questions name one speaker and are asked {how} (\"{example}\"); "
              f"each conversation written once per speaker, with that speaker's turns as role {role} and the "
              f"other's as {other} (no names)", flush=True)
    else:
        print(bm25_reference(turns, queries, qrels), flush=True)
    tokenizers = Tokenizers(settings.assembly.tiktoken_dir or settings.data_dir / "tiktoken")
    with servers(settings) as (owner_dsn, redis_url):
        async with app_client(settings, owner_dsn, redis_url) as client:
            send_time, send_context = [True], [args.context_turns > 0]
            orgs: dict[str, tuple[dict[str, str], dict[str, str]]] = {}
            org_ids: list[str] = []
            started = time.perf_counter()
            for name, group, user in loads:
                org_id, headers = await new_tenant(owner_dsn, f"locomo-{name}-{time.time_ns()}")
                org_ids.append(org_id)
                mine = [t for t in turns if t.group == group]
                orgs[name] = (headers, await append_group(client, headers, group, mine, user)
                              if args.load == "conversations" else
                              await load_group(client, headers, mine, send_time, send_context, args.plain))
            tail = (f"assembly deadline {settings.assembly.deadline_ms} ms, hot set {'on' if args.use_hot else 'off'}")
            if args.load == "conversations":
                print(f"# loaded through POST /v1/conversations/{{id}}/messages in "
                      f"{time.perf_counter() - started:.1f} s "
                      f"(words, {'speaker' if person is None else 'role'}, occurred_at, session; "
                      f"search context derived by the service from "
                      f"the last {settings.conversations.context_turns} turns of its session; {tail})", flush=True)
            else:
                sent = ("not sent: the service does not take it" if not send_time[0] else
                        "sent" if dated else "none parsed")
                context = (f"the {args.context_turns} turns before" if send_context[0] else
                           "not sent: the service does not take it" if args.context_turns else "not sent")
                print(f"# loaded through POST /v1/memories in {time.perf_counter() - started:.1f} s "
                      f"(occurred_at {sent}; search_context {context}; "
                      f"metadata {'not sent' if args.plain else 'sent'}; {tail})", flush=True)
            for name in args.strategies:
                print(await run_strategy(client, name, queries, qrels, orgs), flush=True)
            for name in args.assemblies:
                await forget_accesses(client, owner_dsn, org_ids)
                print(await run_assembly(client, name, queries, qrels, orgs, tokenizers, args.use_hot), flush=True)
            if args.followups:
                await run_followups(client, args, turns, queries, qrels, orgs, tokenizers,
                                    lambda: forget_accesses(client, owner_dsn, org_ids))


async def run_followups(client: Any, args: argparse.Namespace, turns: Sequence[Turn], queries: Sequence[Query],
                        qrels: dict[str, dict[str, int]], orgs: dict[str, tuple[dict[str, str], dict[str, str]]],
                        tokenizers: Tokenizers, forget: Callable[[], Awaitable[None]]) -> None:
    """Per assembly line, the questions that name a speaker: as asked alone, as asked after the
    follow-ups' history (they name someone, so nothing is completed: the history must not cost them),
    and as follow-ups (:func:`as_followups`) with the query completed from the history (the default)
    and not completed."""
    followups = as_followups(queries, turns)
    history = {f.query.id: f.recent_messages for f in followups}
    asked = {q.id: q for q in queries}
    print(f"# follow-ups: {len(followups)} of {len(queries)} questions name a speaker, asked after a user turn "
          "that names them (the previous question about them), the names as pronouns", flush=True)
    for name in args.assemblies:
        named = [asked[f.query.id] for f in followups]
        for label, ask, before, complete in ((f"{name} as asked", named, None, True),
                                             (f"{name} after history", named, history, True),
                                             (f"{name} follow-ups", [f.query for f in followups], history, True),
                                             (f"{name} not completed", [f.query for f in followups], history, False)):
            await forget()
            print(await run_assembly(client, name, ask, qrels, orgs, tokenizers, args.use_hot, before, complete,
                                     label), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dir", help="directory with corpus.jsonl, queries.jsonl and qrels.tsv")
    parser.add_argument("--categories", nargs="*", default=["1", "2", "3", "4"],
                        help="question categories to score (none given: all)")
    parser.add_argument("--max-queries", type=int, default=0, help="0 = every question")
    parser.add_argument("--strategies", nargs="*", default=list(SEARCH_STRATEGIES), choices=list(SEARCH_STRATEGIES),
                        help="search strategies to score (none given: only the assembly lines)")
    parser.add_argument("--assemblies", nargs="*", default=list(ASSEMBLIES), type=assembly_name,
                        help=f"assembly lines: {', '.join(ASSEMBLIES)}, or assemble_N for N tokens")
    parser.add_argument("--use-hot", action="store_true", help="let assembly use the agent's hot set")
    parser.add_argument("--load", choices=("conversations", "memories"), default="conversations",
                        help="write the turns through the conversation API (default) or as memories")
    parser.add_argument("--context-turns", type=int, default=2,
                        help="--load memories: send this many preceding turns (same conversation and session) as "
                             "each turn's search_context; 0: none")
    parser.add_argument("--followups", action="store_true",
                        help="also ask the questions that name a speaker as a chat's follow-ups (see run_followups)")
    parser.add_argument("--as-user", action="store_true",
                        help="ask the questions that name one speaker in the first person, against the conversation "
                             "written with that speaker as role user and the other as assistant")
    parser.add_argument("--to-assistant", action="store_true",
                        help="ask the questions that name one speaker in the second person, against the conversation "
                             "written with that speaker as role assistant and the other as user")
    parser.add_argument("--plain", action="store_true",
                        help="--load memories: send only the text and occurred_at (no metadata, so no speaker)")
    args = parser.parse_args()
    if (args.as_user or args.to_assistant) and (args.load != "conversations" or args.followups):
        parser.error("--as-user and --to-assistant write conversations (--load conversations) and ask no follow-ups")
    if args.as_user and args.to_assistant:
        parser.error("--as-user or --to-assistant, not both")
    configure_logs("warning")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one INFO line per request otherwise
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
