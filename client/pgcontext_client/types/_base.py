"""The base of request bodies."""

from __future__ import annotations

import msgspec


class In(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A request body: fields left at their default are not sent."""
