"""Directive API types."""

from __future__ import annotations

from datetime import datetime

import msgspec


class DirectiveIn(msgspec.Struct, forbid_unknown_fields=True):
    content: str


class DirectiveOut(msgspec.Struct):
    agent_id: str
    content: str
    version: int
    updated_at: datetime
