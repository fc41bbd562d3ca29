"""The last directive this process read or wrote for each agent, for an assembly whose read does not answer.

On a busy host (other programs' processes taking the cores) an assembly's directive read can miss
the wall although Redis and Postgres are fine: the answer sits in a socket while the event loop waits
for a core. Rather than leave the agent's standing instructions out, the assembly then uses the copy
this process last saw, and says so (``degradation_reasons``: ``directive_unconfirmed``, the branch's
``source`` ``memory`` and the copy's age in its ``detail``); a copy older than
``PGCONTEXT_ASSEMBLY_DIRECTIVE_LAST_KNOWN_S`` is not used.

A copy is stamped with when what it holds was known current: a read with the time it *started* (a
write committed meanwhile may be newer), a write with the time it committed. A stamp older than the
one held is ignored, so a read that answers late never replaces a newer write's copy. "No directive"
(a read that found none, a delete) is a copy too: an agent without one is then not reported missing.

Bounds, per org so that no org can push out another's copies: ``ORG_BYTES`` of content per org (its
least recently stored agents go first; a directive larger than that is not kept) and ``MAX_ORGS``
orgs (the least recently used org's copies go). Worst case ``ORG_BYTES * MAX_ORGS``.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass
from uuid import UUID

from service.directives.types import DirectiveOut

ORG_BYTES = 128 * 1024
MAX_ORGS = 512


@dataclass(frozen=True, slots=True)
class Copy:
    directive: DirectiveOut | None
    """None: the agent had no directive."""
    stamp: float
    """``time.monotonic()`` when it was known current."""
    size: int
    """Bytes it counts against its org's bound."""

    def age_s(self) -> float:
        return time.monotonic() - self.stamp


def _same(a: DirectiveOut | None, b: DirectiveOut | None) -> bool:
    """The same directive (or the same absence): its version and write time, not its text, compared."""
    if a is None or b is None:
        return a is b
    return a.version == b.version and a.updated_at == b.updated_at


def _size(directive: DirectiveOut | None) -> int:
    return 0 if directive is None else len(directive.content.encode()) + len(directive.agent_id)


class _Org:
    __slots__ = ("bytes", "copies")

    def __init__(self) -> None:
        self.copies: OrderedDict[str, Copy] = OrderedDict()
        self.bytes = 0


class LastKnown:
    def __init__(self, *, org_bytes: int = ORG_BYTES, max_orgs: int = MAX_ORGS) -> None:
        self.org_bytes = org_bytes
        self.max_orgs = max_orgs
        self._orgs: OrderedDict[UUID, _Org] = OrderedDict()

    def remember(self, org_id: UUID, agent_id: str, directive: DirectiveOut | None, stamp: float) -> None:
        """``directive`` was the agent's current one at ``stamp`` (``time.monotonic()``). Called on every
        directive read: the same version again only moves its stamp."""
        org = self._orgs.get(org_id)
        held = None if org is None else org.copies.get(agent_id)
        if held is not None and held.stamp > stamp:
            return
        if org is not None and held is not None and _same(held.directive, directive):
            org.copies[agent_id] = Copy(held.directive, stamp, held.size)
            org.copies.move_to_end(agent_id)
            self._orgs.move_to_end(org_id)
            return
        size = _size(directive)
        if org is None:
            if size > self.org_bytes:
                return
            org = self._orgs[org_id] = _Org()
            while len(self._orgs) > self.max_orgs:
                self._orgs.popitem(last=False)
        self._orgs.move_to_end(org_id)
        if held is not None:
            org.bytes -= org.copies.pop(agent_id).size
        if size > self.org_bytes:
            return  # an older copy of it must not stand in for it either
        org.copies[agent_id] = Copy(directive, stamp, size)
        org.bytes += size
        while org.bytes > self.org_bytes:
            org.bytes -= org.copies.popitem(last=False)[1].size

    def get(self, org_id: UUID, agent_id: str, max_age_s: float) -> Copy | None:
        """The agent's copy if it is at most ``max_age_s`` old (0: none)."""
        if max_age_s <= 0:
            return None
        org = self._orgs.get(org_id)
        held = None if org is None else org.copies.get(agent_id)
        if held is None or held.age_s() > max_age_s:
            return None
        return held
