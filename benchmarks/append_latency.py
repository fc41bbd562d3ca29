"""Appending to conversations: latency of one message, and batch throughput against the embedder alone.

    python benchmarks/append_latency.py ../shared/data/locomo-dev [--messages 400] [--batches 20]
    python benchmarks/append_latency.py DIR --url http://host:8080 --key pgc_...   # an already running service

Without ``--url`` it starts ``pgcontext serve`` as a subprocess on the embedded default (its own
Postgres and Redis under a temporary data directory). The messages are LoCoMo turns from DIR's
``corpus.jsonl``, as a client appends them: the words, the
speaker (the corpus's leading ``Name: ``), the session and the time. Three measurements, one after
the other, each in fresh conversations of one org:

* **one message at c=1**: ``--messages`` appends of a single message to one conversation, one at a
  time (each derives its search context from the turns before it, as in use);
* **one message at c=8**: the same number of single-message appends from 8 concurrent clients,
  each to a conversation of its own;
* **64-message batches**: ``--batches`` appends of 64 messages each, one at a time, against the
  service's embedder alone (built in this process with the service's settings) embedding the same
  64 texts, batch by batch: messages/s of each and their ratio.

With ``--message-ids`` every message carries a ``message_id`` of its own, as the framework adapters
send them: the service then reads which are already in the conversation before it embeds.

Latency is client-side (request sent to answer read) over HTTP on the same machine: p50/p95/p99 and
messages/s. The load generator competes with the service for the same cores; run it on a quiet
machine and compare settings in the same run (``--service-env``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import re
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._common import percentile  # noqa: E402
from benchmarks.assemble_load import service_env  # noqa: E402
from benchmarks.bench_org import service  # noqa: E402
from service.embedded.postgres import free_port  # noqa: E402

BATCH = 64
CONCURRENT = 8
_SPEAKER = re.compile(r"^(?P<name>[^:\n]{1,100}): ")


def load_messages(root: Path) -> list[dict[str, Any]]:
    """Every turn of ``corpus.jsonl`` as a message a client appends (no message ids: each is new)."""
    out: list[dict[str, Any]] = []
    with (root / "corpus.jsonl").open() as f:
        for line in f:
            if not line.strip():
                continue
            doc = json.loads(line)
            meta = doc.get("metadata") or {}
            text, speaker = doc["text"], meta.get("speaker")
            if (m := _SPEAKER.match(text)) and (speaker is None or m.group("name") == speaker):
                speaker, text = m.group("name"), text[m.end():]
            message: dict[str, Any] = {"content": text, "session_id": str(meta.get("session", "1"))}
            if isinstance(speaker, str) and speaker.strip():
                message["speaker"] = speaker
            out.append(message)
    return out


def cycle(messages: Sequence[dict[str, Any]], n: int, start: int = 0) -> list[dict[str, Any]]:
    return [messages[(start + i) % len(messages)] for i in range(n)]


async def timed_appends(http: aiohttp.ClientSession, url: str, headers: dict[str, str], conversation: str,
                        batches: Sequence[list[dict[str, Any]]], ids: bool = False) -> list[float]:
    """Append each batch in turn to ``conversation``; the ms each took. ``ids``: every message carries a
    ``message_id`` of its own, as the framework adapters send them (the service then reads which are
    already there before it embeds)."""
    took: list[float] = []
    for batch in batches:
        if ids:
            batch = [{**m, "message_id": uuid.uuid4().hex} for m in batch]
        started = time.perf_counter()
        async with http.post(f"{url}/v1/conversations/{conversation}/messages", json={"messages": batch},
                             headers=headers) as r:
            body = await r.read()
            if r.status != 201:
                raise SystemExit(f"append answered {r.status}: {body[:300]!r}")
        took.append((time.perf_counter() - started) * 1000)
    return took


def latency_line(name: str, took: Sequence[float], messages: int, seconds: float) -> str:
    return (f"{name:<24} appends={len(took)}  p50={percentile(took, 50):.1f} ms  p95={percentile(took, 95):.1f} ms  "
            f"p99={percentile(took, 99):.1f} ms  messages/s={messages / seconds:.1f}")


async def measure(url: str, headers: dict[str, str], messages: list[dict[str, Any]], n: int, batches: int,
                  embed: Callable[[list[str]], Awaitable[Any]], ids: bool = False) -> list[str]:
    run = f"{os.getpid()}-{time.time_ns()}"
    lines = []
    async with aiohttp.ClientSession() as http:
        await timed_appends(http, url, headers, f"warm-{run}", [cycle(messages, 8)])  # first-request costs
        started = time.perf_counter()
        took = await timed_appends(http, url, headers, f"c1-{run}", [[m] for m in cycle(messages, n)], ids)
        lines.append(latency_line("one message, c=1", took, n, time.perf_counter() - started))

        each = max(1, n // CONCURRENT)
        started = time.perf_counter()
        parts = await asyncio.gather(*(timed_appends(http, url, headers, f"c8-{run}-{w}",
                                                     [[m] for m in cycle(messages, each, w * each)], ids)
                                       for w in range(CONCURRENT)))
        took = [ms for part in parts for ms in part]
        lines.append(latency_line(f"one message, c={CONCURRENT}", took, each * CONCURRENT,
                                  time.perf_counter() - started))

        groups = [cycle(messages, BATCH, b * BATCH) for b in range(batches)]
        started = time.perf_counter()
        took = await timed_appends(http, url, headers, f"batch-{run}", groups, ids)
        seconds = time.perf_counter() - started
        appended = BATCH * batches / seconds
        lines.append(latency_line(f"{BATCH}-message batches", took, BATCH * batches, seconds))
    started = time.perf_counter()
    for group in groups:
        await embed([m["content"] for m in group])
    alone = BATCH * batches / (time.perf_counter() - started)
    lines.append(f"{'embedder alone':<24} batches={batches} of {BATCH}  messages/s={alone:.1f}  "
                 f"appends at {appended / alone:.0%} of the embedder's own throughput")
    return lines


async def embedder_alone() -> tuple[Callable[[list[str]], Awaitable[Any]], Callable[[], Awaitable[None]]]:
    from service.embeddings import build_embedder
    from service.settings import load_settings

    settings = load_settings()
    embedder = build_embedder(settings.embedding, settings.data_dir)
    await embedder.embed(["warm-up"])
    return embedder.embed, embedder.aclose


async def run(url: str, key: str, messages: list[dict[str, Any]], n: int, batches: int, ids: bool) -> list[str]:
    embed, close = await embedder_alone()
    try:
        return await measure(url, {"Authorization": f"Bearer {key}"}, messages, n, batches, embed, ids)
    finally:
        await close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dir", type=Path, help="directory with corpus.jsonl (LoCoMo-style turns)")
    parser.add_argument("--messages", type=int, default=400, help="single-message appends at c=1 and at c=8")
    parser.add_argument("--batches", type=int, default=20, help=f"{BATCH}-message appends")
    parser.add_argument("--message-ids", action="store_true",
                        help="give every message a message_id of its own, as the framework adapters do")
    parser.add_argument("--url", help="a running service (default: start one on the embedded default)")
    parser.add_argument("--key", help="API key for --url")
    parser.add_argument("--service-env", action="append", default=[], metavar="PGCONTEXT_NAME=VALUE",
                        type=service_env, help="a setting for the started service (repeatable)")
    args = parser.parse_args()
    messages = load_messages(args.dir)
    print(f"# append latency: {platform.platform()}, python {platform.python_version()}, {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.1f}; {len(messages)} turns of {args.dir.name}", flush=True)
    if args.url:
        if not args.key:
            raise SystemExit("--url needs --key")
        lines = asyncio.run(run(args.url, args.key, messages, args.messages, args.batches, args.message_ids))
    else:
        with contextlib.ExitStack() as stack:
            data_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="pgcontext-append-", dir="/tmp")))
            url, key = stack.enter_context(service(data_dir, free_port(), env_extra=dict(args.service_env)))
            if key is None:
                raise SystemExit("the started service printed no API key")
            lines = asyncio.run(run(url, key, messages, args.messages, args.batches, args.message_ids))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
