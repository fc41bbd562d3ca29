"""What a branch returns: candidate rows with that branch's own score, best first."""

from __future__ import annotations

from dataclasses import dataclass
from uuid import UUID

import asyncpg


@dataclass(frozen=True, slots=True)
class Hit:
    id: UUID
    text: str
    kind: str
    source: str | None
    level: int | None
    breadcrumb: str | None
    score: float
    row: asyncpg.Record | None = None
    """The branch's whole row (with the scoring fields when the search asked for them)."""


def hits_from_rows(rows: list[asyncpg.Record]) -> list[Hit]:
    return [Hit(id=r["id"], text=r["text"], kind=r["kind"], source=r["source_path"], level=r["level"],
                breadcrumb=r["breadcrumb"], score=float(r["score"]), row=r) for r in rows]
