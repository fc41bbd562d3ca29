"""The caller's own deadline (``X-Deadline-Ms``, ``X-Timeout-Ms``): past it an assembly is the ladder's L3."""

from __future__ import annotations

import time
from dataclasses import dataclass

from service.errors import BadRequest


@dataclass(frozen=True, slots=True)
class CallerDeadline:
    """The caller's own deadline as a ``time.monotonic()`` instant (None: only the server's wall)."""

    at: float | None = None

    def remaining_ms(self) -> float | None:
        return None if self.at is None else (self.at - time.monotonic()) * 1000

    def passed(self) -> bool:
        return self.at is not None and time.monotonic() >= self.at

    @classmethod
    def from_headers(cls, deadline_ms: str | None, timeout_ms: str | None) -> CallerDeadline:
        """``X-Deadline-Ms``: absolute Unix time in ms; ``X-Timeout-Ms``: ms from now. Sooner wins."""
        candidates: list[float] = []
        now_mono, now_unix = time.monotonic(), time.time()
        for name, raw, absolute in (("X-Deadline-Ms", deadline_ms, True), ("X-Timeout-Ms", timeout_ms, False)):
            if raw is None:
                continue
            try:
                value = float(raw)
            except ValueError as exc:
                raise BadRequest(f"{name} must be a number of milliseconds, got {raw[:40]!r}",
                                 code="validation_error") from exc
            if value != value or value in (float("inf"), float("-inf")):
                raise BadRequest(f"{name} must be finite", code="validation_error")
            seconds = (value / 1000 - now_unix) if absolute else value / 1000
            candidates.append(now_mono + seconds)
        return cls(min(candidates) if candidates else None)
