"""The last directive copies an assembly can stand in with: newest stamp wins, bounded per org."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from uuid import uuid4

from service.directives.last_known import LastKnown
from service.directives.types import DirectiveOut

A, B = uuid4(), uuid4()


def directive(content: str, version: int = 1, agent: str = "helper") -> DirectiveOut:
    return DirectiveOut(agent_id=agent, content=content, version=version, updated_at=datetime.now(UTC))


def test_a_late_read_never_replaces_a_newer_copy() -> None:
    known = LastKnown()
    now = time.monotonic()
    known.remember(A, "helper", directive("new", 2), now)  # a write committed
    known.remember(A, "helper", directive("old", 1), now - 1.0)  # a read that started before it answers late
    copy = known.get(A, "helper", 60)
    assert copy is not None and copy.directive is not None and copy.directive.content == "new"
    known.remember(A, "helper", None, now + 1.0)  # deleted since
    copy = known.get(A, "helper", 60)
    assert copy is not None and copy.directive is None


def test_too_old_or_another_orgs_copy_is_not_given() -> None:
    known = LastKnown()
    known.remember(A, "helper", directive("mine"), time.monotonic() - 10)
    assert known.get(A, "helper", 5) is None
    assert known.get(A, "helper", 60) is not None
    assert known.get(B, "helper", 60) is None


def test_each_org_keeps_its_own_bytes_and_pushes_out_only_its_own() -> None:
    known = LastKnown(org_bytes=1000, max_orgs=8)
    now = time.monotonic()
    known.remember(B, "theirs", directive("x" * 100, agent="theirs"), now)
    for n in range(50):  # A stores far more than its share
        known.remember(A, f"agent-{n}", directive("y" * 100, agent=f"agent-{n}"), now)
    assert known.get(B, "theirs", 60) is not None
    assert known.get(A, "agent-49", 60) is not None and known.get(A, "agent-0", 60) is None
    kept = sum(known.get(A, f"agent-{n}", 60) is not None for n in range(50))
    assert 0 < kept <= 1000 // 100


def test_a_directive_larger_than_the_share_is_not_kept_and_drops_the_older_copy() -> None:
    known = LastKnown(org_bytes=1000)
    now = time.monotonic()
    known.remember(A, "helper", directive("short"), now)
    known.remember(A, "helper", directive("z" * 5000, 2), now + 1)
    assert known.get(A, "helper", 60) is None


def test_the_least_recently_used_org_goes_past_the_org_bound() -> None:
    known = LastKnown(max_orgs=2)
    now = time.monotonic()
    orgs = [uuid4() for _ in range(3)]
    for org in orgs:
        known.remember(org, "helper", directive("d"), now)
    assert known.get(orgs[0], "helper", 60) is None
    assert all(known.get(org, "helper", 60) is not None for org in orgs[1:])


def test_reading_the_same_version_again_renews_its_copy() -> None:
    known = LastKnown()
    now = time.monotonic()
    held = directive("same", 3)
    known.remember(A, "helper", held, now - 100)
    assert known.get(A, "helper", 50) is None
    known.remember(A, "helper", held, now)
    copy = known.get(A, "helper", 50)
    assert copy is not None and copy.directive == held
    assert known.get(A, "helper", 0) is None  # 0: no copy is ever used
