"""Settings of the fact lifecycle: duplicate detection and the optional model consolidation."""

from __future__ import annotations

from dataclasses import dataclass

from service.settings.env import secret


@dataclass(frozen=True, slots=True)
class FactSettings:
    """Write-time duplicate detection (no model) and, when an endpoint is set, model consolidation."""

    dedup_cosine: float = 0.70
    """Embedding cosine a near-duplicate must reach; above it the words decide (same words in any order,
    up to ``dedup_max_synonyms`` WordNet synonyms, never a different number, negation, date or name).
    Tuned and measured in docs/benchmarks.md ("Deduplication")."""
    dedup_max_synonyms: int = 1
    """Most word pairs two near-duplicates may differ by, each a pair of synonyms."""
    dedup_candidates: int = 5
    """Nearest current memories (same org, agent, kind and key) checked per written text."""
    consolidation_api_base: str | None = secret("dsn")
    """OpenAI-compatible chat endpoint's base URL (``.../v1``) for model consolidation. Unset: off (the
    default); duplicates are then decided by the rules alone."""
    consolidation_api_key: str | None = secret("value")
    """Bearer token for the consolidation endpoint."""
    consolidation_model: str = "gpt-4o-mini"
    """Chat model the consolidation asks."""
    consolidation_band: float = 0.75
    """A new memory whose nearest current memory is at least this close (cosine) but was not merged by
    the rules is queued for the model (after the write commits)."""
    consolidation_timeout_s: float = 20.0
    """One model call's timeout."""
    consolidation_poll_s: float = 1.0
    """How often the worker looks for due jobs when idle."""
    consolidation_max_attempts: int = 5
    """A job whose model call or decision failed this many times is marked ``failed`` (its memory stays
    as written). Retries back off exponentially from ``consolidation_retry_s``."""
    consolidation_retry_s: float = 2.0
    """First retry delay."""
    consolidation_worker: bool = True
    """This process runs a consolidation worker. False: it only queues jobs, and other instances (with
    the same endpoint set) decide them."""
    consolidation_lease_s: float = 60.0
    """A claimed job not finished within this is claimed again (its worker died or stalled)."""

    @property
    def consolidation_enabled(self) -> bool:
        return self.consolidation_api_base is not None
