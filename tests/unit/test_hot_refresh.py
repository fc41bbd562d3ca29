"""When an aged hot set is rebuilt: each agent at its own point in the last quarter of ``hot_refresh_s``."""

from __future__ import annotations

from uuid import UUID

from service.assembly.hot import REFRESH_SPREAD, refresh_age_s

ORG = UUID("01a23093-6e9b-72a6-9851-1446233a280f")


def test_each_agent_has_a_fixed_point_in_the_last_quarter() -> None:
    ages = [refresh_age_s(60, ORG, f"agent-{i}") for i in range(1000)]
    assert all(60 * (1 - REFRESH_SPREAD) <= age <= 60 for age in ages)
    assert ages == [refresh_age_s(60, ORG, f"agent-{i}") for i in range(1000)]  # the same on every read
    # spread over the whole window, not bunched: sets filled together are refilled apart
    assert min(ages) < 46 and max(ages) > 59
    assert len({round(age) for age in ages}) == 16
    assert refresh_age_s(60, UUID(int=ORG.int + 1), "agent-0") != ages[0]  # orgs differ too


def test_zero_refresh_rebuilds_at_once() -> None:
    assert refresh_age_s(0, ORG, "a1") == 0
