"""Prometheus metrics of context assembly, served at ``/metrics`` with the HTTP ones.

Labels are bounded enums (ladder level, branch, outcome, reason): never an org, agent or query, so
the metrics say nothing about any tenant and their cardinality stays fixed. Module-level, hence
shared by every app in a process (tests build many); with several workers each process reports
its own, as for the HTTP metrics.
"""

from __future__ import annotations

from typing import Final

from prometheus_client import Counter, Histogram

from service.assembly.types import AssembleResponse

_MS_BUCKETS: Final = (0.005, 0.01, 0.02, 0.03, 0.04, 0.05, 0.075, 0.1, 0.25, 0.5, 1.0, 2.5)

ASSEMBLIES: Final = Counter("pgcontext_assemblies", "Context assemblies answered, by degradation level",
                            ["level"])
BRANCHES: Final = Counter("pgcontext_assembly_branches", "Assembly branch outcomes", ["branch", "outcome"])
ASSEMBLY_SECONDS: Final = Histogram("pgcontext_assembly_seconds",
                                    "Server-side assembly time from admission (metrics.total_ms)",
                                    buckets=_MS_BUCKETS)
QUEUED_SECONDS: Final = Histogram("pgcontext_assembly_queued_seconds",
                                  "Time assemblies waited to be admitted (metrics.queued_ms)", buckets=_MS_BUCKETS)
COLD_SEARCHES: Final = Counter(
    "pgcontext_assembly_cold_searches",
    "Assembly cold searches by the strategy they ran and why (the response's retrieval.reason): planned, light "
    "(full searches would miss the budget: lexical with fewer postings), embedder_circuit_open / embedder_busy "
    "(auto did not embed the query), embedder_timeout / embedder_error / branch_timeout / branch_error / "
    "no_lexical_candidates (a planned part failed or was late)", ["strategy", "why"])
DEGRADATIONS: Final = Counter(
    "pgcontext_assembly_degradations",
    "Assemblies answered without part of what was planned, by the response's degradation_reasons: "
    "directive_missing, directive_unconfirmed, hot_unavailable, cold_unavailable, retrieval_reduced", ["reason"])
NOT_ASSEMBLED: Final = Counter("pgcontext_assemblies_not_answered",
                               "Assemblies ended without a context: L3 (deadline, client gone) or refused "
                               "(overloaded)", ["reason"])


def record(response: AssembleResponse) -> None:
    ASSEMBLIES.labels(response.degradation_level).inc()
    b = response.branches
    for name, branch in (("directive", b.directive), ("hot", b.hot), ("cold", b.cold)):
        BRANCHES.labels(name, branch.outcome).inc()
    if b.cold.outcome == "ok" and b.cold.source is not None:  # auto quietly going lexical shows here too
        COLD_SEARCHES.labels(b.cold.source, response.retrieval.reason).inc()
    for reason in response.degradation_reasons:
        DEGRADATIONS.labels(reason).inc()
    ASSEMBLY_SECONDS.observe(response.metrics.total_ms / 1000)
    QUEUED_SECONDS.observe(response.metrics.queued_ms / 1000)


def not_answered(reason: str) -> None:
    NOT_ASSEMBLED.labels(reason).inc()

