"""What a branch returns: candidate rows with that branch's own score, best first."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID

import asyncpg

from service.memories.facts.types import is_current
from service.memories.repo import message_ref
from service.memories.types import DOCUMENT_CHUNK_KIND, MessageRef


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
    agent_id: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    occurred_at: datetime | None = None
    superseded_by: UUID | None = None
    valid_until: datetime | None = None
    message: MessageRef | None = None
    """A conversation's message: its place in the conversation and who said it."""

    @property
    def current(self) -> bool:
        return is_current(self.superseded_by, self.valid_until)

    @property
    def speaker(self) -> str | None:
        return None if self.message is None else self.message.speaker

    @property
    def lines(self) -> tuple[int | None, int | None]:
        """A document chunk's line span in its file (``line_start``, ``line_end``); (None, None) otherwise."""
        if self.kind != DOCUMENT_CHUNK_KIND or self.row is None:
            return None, None
        return self.row.get("line_start"), self.row.get("line_end")


def hits_from_rows(rows: list[asyncpg.Record]) -> list[Hit]:
    return [Hit(id=r["id"], text=r["text"], kind=r["kind"], source=r["source_path"], level=r["level"],
                breadcrumb=r["breadcrumb"], score=float(r["score"]), row=r, agent_id=r["agent_id"],
                metadata=r["metadata"], occurred_at=r["occurred_at"], message=message_ref(r),
                superseded_by=r.get("superseded_by"), valid_until=r.get("valid_until")) for r in rows]
