"""The assembly load's requests and driver, shared by the load benchmarks (``assemble_load``,
``scale_out``, ``overload``, ``soak``): the assemble request body, the workers that issue it, and per
level what came back (latencies, degradation levels, cold searches, whether the directive reached the
context, CPU per request by process group)."""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import msgspec

from benchmarks._common import MODEL, SERVICE_MAIN_THREADS, cpu_seconds_by_group, percentile


@dataclass
class Level:
    name: str
    concurrency: int
    latencies_ms: list[float] = field(default_factory=list)
    server_ms: list[float] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    levels: Counter[str] = field(default_factory=Counter)
    strategies: Counter[str] = field(default_factory=Counter)
    runs: Counter[str] = field(default_factory=Counter)
    """``planned->ran (reason)`` of the cold search (the response's ``retrieval``; ``?`` from a service without it)."""
    directives: Counter[str] = field(default_factory=Counter)
    """Outcome of the directive branch (a directive that missed its branch is left out of the context)."""
    directive_in_context: Counter[str] = field(default_factory=Counter)
    """Every agent has a directive (:func:`ensure_directives`), so each assembly is ``present`` (the
    response holds it; ``unconfirmed`` of those: the service's last copy stood in for a late read),
    ``reported`` (absent, and ``degradation_reasons`` says ``directive_missing``) or ``missing``
    (absent and not reported: a broken contract)."""
    seconds: float = 0.0
    cpu_ms: dict[str, float] = field(default_factory=dict)
    """CPU ms per successful request by process group (service, postgres, redis, loadgen)."""
    cold_candidates: list[int] = field(default_factory=list)
    """Candidates each answered cold search handed to ranking (the agent's own and org-wide memories)."""
    embeddings: Counter[str] = field(default_factory=Counter)
    """Query-embedding cache lookups during the level (``hit``/``miss``, from ``/metrics``; empty when
    it is not readable): a hit skips the model, the costliest step of a full hybrid assembly."""

    def candidates_line(self) -> str:
        """Mean and median cold candidates per assembly whose cold search answered."""
        if not self.cold_candidates:
            return "none answered"
        ordered = sorted(self.cold_candidates)
        return f"mean {sum(ordered) / len(ordered):.1f}, p50 {ordered[len(ordered) // 2]}"

    def embeddings_line(self) -> str:
        looked = sum(self.embeddings.values())
        if not looked:
            return "-"
        return (f"{self.embeddings['miss']} embedded, {self.embeddings['hit']} from the cache "
                f"({100 * self.embeddings['hit'] / looked:.0f}% cached)")

    def directive_line(self) -> str:
        d = self.directive_in_context
        total = max(sum(d.values()), 1)
        present = d["present"] + d["unconfirmed"]
        return (f"present {present} ({100 * present / total:.2f}%; last copy {d['unconfirmed']}), reported missing "
                f"{d['reported']} ({100 * d['reported'] / total:.2f}%), missing unreported {d['missing']}")

    def runs_line(self) -> str:
        """What the cold searches ran against what they planned, and the share that ran the plan."""
        total = max(sum(self.runs.values()), 1)
        planned = sum(n for k, n in self.runs.items() if k.endswith("(planned)"))
        parts = ", ".join(f"{k} {n}" for k, n in self.runs.most_common())
        return f"{parts}; ran the plan {100 * planned / total:.1f}%"

    def cpu_line(self) -> str:
        """Per group, the service's split into its main threads (event loops) and the rest (other threads:
        the query embeddings, mostly), e.g. ``service 7.6 (event loop 5.0, threads 2.6), postgres 5.1``."""
        groups = {k: v for k, v in self.cpu_ms.items() if k != SERVICE_MAIN_THREADS}
        if not groups:
            return "-"
        main = self.cpu_ms.get(SERVICE_MAIN_THREADS)

        def part(k: str, v: float) -> str:
            if k != "service" or main is None:
                return f"{k} {v:.1f}"
            return f"{k} {v:.1f} (event loop {main:.1f}, threads {v - main:.1f})"

        parts = ", ".join(part(k, v) for k, v in groups.items())
        return f"{parts} (total {sum(groups.values()):.1f})"

    @property
    def requests(self) -> int:
        return len(self.latencies_ms) + sum(self.errors.values())

    def row(self, baseline: Level | None) -> str:
        lat = self.latencies_ms
        ok = len(lat)
        share = ", ".join(f"{k} {100 * v / max(ok, 1):.1f}%" for k, v in sorted(self.levels.items())) or "-"
        ratio = (f"{percentile(lat, 50) / percentile(baseline.latencies_ms, 50):.1f}x"
                 if baseline and baseline.latencies_ms and lat else "-")
        server = (f"{percentile(self.server_ms, 50):.1f} / {percentile(self.server_ms, 99):.1f}"
                  if self.server_ms else "-")
        return (f"| {self.name} | {self.concurrency} | {self.requests} | {percentile(lat, 50):.1f} | "
                f"{percentile(lat, 95):.1f} | {percentile(lat, 99):.1f} | {ok / self.seconds:.0f} | "
                f"{100 * sum(self.errors.values()) / max(self.requests, 1):.1f}% | {share} | {server} | {ratio} |")


HEADER = ("| request | conc. | requests | p50 ms | p95 ms | p99 ms | req/s | errors | levels | server p50 / p99 ms "
          "| p50 vs baseline |\n|---|---|---|---|---|---|---|---|---|---|---|")


class _Branch(msgspec.Struct):
    outcome: str
    source: str | None = None
    count: int | None = None


class _Branches(msgspec.Struct):
    directive: _Branch
    cold: _Branch


class _Metrics(msgspec.Struct):
    total_ms: float


class _Retrieval(msgspec.Struct):
    planned: str
    ran: str | None
    reason: str


class _Assembled(msgspec.Struct):
    """The fields of an assembly response the load test reads (msgspec skips the rest unparsed)."""

    degradation_level: str
    metrics: _Metrics
    branches: _Branches
    retrieval: _Retrieval | None = None
    """Absent from a service that predates the retrieval report (``--compare-root``)."""
    directive: dict[str, Any] | None = None
    degradation_reasons: list[str] = msgspec.field(default_factory=list)
    """Absent from an older service: a directive left out is then counted ``missing``."""


def directive_in_context(out: _Assembled) -> str:
    """``present``, ``unconfirmed``, ``reported`` or ``missing`` (see :attr:`Level.directive_in_context`)."""
    if out.directive is not None:
        return "unconfirmed" if "directive_unconfirmed" in out.degradation_reasons else "present"
    return "reported" if "directive_missing" in out.degradation_reasons else "missing"


_decode_assembled = msgspec.json.Decoder(_Assembled).decode
Call = Callable[[int], Awaitable[tuple[int, bytes]]]


async def drive(name: str, concurrency: int, requests: int, seconds: float, call: Call, level: Level) -> None:
    """``concurrency`` workers issue calls until ``requests`` were made or ``seconds`` passed."""
    counter = iter(range(requests))
    stop_at = time.perf_counter() + seconds

    async def worker() -> None:
        for i in counter:
            if time.perf_counter() > stop_at:
                return
            started = time.perf_counter()
            try:
                status, body = await call(i)
            except (aiohttp.ClientError, TimeoutError) as exc:
                level.errors[type(exc).__name__] += 1
                continue
            elapsed = (time.perf_counter() - started) * 1000
            if status != 200:
                level.errors[str(status)] += 1
                continue
            level.latencies_ms.append(elapsed)
            if name == "assemble":
                out = _decode_assembled(body)
                level.levels[out.degradation_level] += 1
                level.server_ms.append(out.metrics.total_ms)
                level.strategies[out.branches.cold.source or out.branches.cold.outcome] += 1
                if out.branches.cold.outcome == "ok" and out.branches.cold.count is not None:
                    level.cold_candidates.append(out.branches.cold.count)
                r = out.retrieval
                level.runs[f"?->{out.branches.cold.source or out.branches.cold.outcome}" if r is None
                           else f"{r.planned}->{r.ran or 'none'} ({r.reason})"] += 1
                level.directives[out.branches.directive.outcome] += 1
                level.directive_in_context[directive_in_context(out)] += 1

    cpu_before = cpu_seconds_by_group()
    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    level.seconds = time.perf_counter() - started
    cpu_after = cpu_seconds_by_group()
    done = max(len(level.latencies_ms), 1)
    level.cpu_ms = {k: round(1000 * (v - cpu_before.get(k, 0.0)) / done, 2) for k, v in cpu_after.items()}


def assemble_body(i: int, queries: Sequence[str], agents: int, rng: random.Random,
                  strategy: str | None = None, timeout_ms: int | None = None) -> dict[str, Any]:
    query = queries[i % len(queries)]
    retrieval: dict[str, Any] = {} if strategy is None else {"retrieval": {"strategy": strategy}}
    if timeout_ms is not None:
        retrieval["timeout_ms"] = timeout_ms  # the caller's deadline (X-Timeout-Ms's body field)
    # agent-0 holds no memory of its own when the agents divide --org-wide-every (i % 20 == 0 is org-wide
    # too), so the others are asked for; with one agent, agent-0 holds every memory that is not org-wide.
    return {**retrieval,
        "agent_id": f"agent-{rng.randrange(1, agents) if agents > 1 else 0}", "query": query, "model": MODEL,
        "max_context_tokens": 4000,
        "reserve_tokens": 500,
        "recent_messages": [{"role": "user", "content": f"I am reading about this: {query}"},
                            {"role": "assistant", "content": "Let me look at what we know about it."},
                            {"role": "user", "content": "Is the claim supported?"}],
    }
