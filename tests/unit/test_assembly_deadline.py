"""The wall an assembly runs under: the service's deadline, or the caller's, up to the maximum."""

from __future__ import annotations

import time

import pytest

from service.assembly.deadline import CallerDeadline, plan_wall
from service.errors import BadRequest
from service.settings import AssemblySettings

S = AssemblySettings(deadline_ms=40, processing_reserve_ms=6, directive_timeout_ms=0, hot_timeout_ms=15,
                     cold_timeout_ms=0, max_deadline_ms=1000)


def test_without_a_caller_deadline_the_default_wall_and_timeouts() -> None:
    wall = plan_wall(S, None)
    assert (wall.deadline_ms, wall.wall_ms, wall.directive_ms, wall.hot_ms, wall.cold_ms) == (40, 34, 34, 15, 34)
    assert not wall.extended and wall.scale == 1.0


def test_a_longer_caller_deadline_lengthens_the_wall_and_every_branch_in_proportion() -> None:
    wall = plan_wall(S, 400.0)  # ten times the default: the reserve for ranking grows with it too
    assert (wall.deadline_ms, wall.wall_ms) == (400, 340) and wall.extended and wall.scale == 10.0
    assert (wall.directive_ms, wall.hot_ms, wall.cold_ms) == (340, 150, 340)


def test_the_caller_deadline_is_capped_by_the_maximum() -> None:
    wall = plan_wall(S, 5000.0)
    assert (wall.deadline_ms, wall.wall_ms, wall.hot_ms) == (1000, 850, 375)


def test_a_shorter_caller_deadline_shortens_the_wall_and_caps_the_branches() -> None:
    wall = plan_wall(S, 16.0)
    assert (wall.deadline_ms, wall.wall_ms, wall.directive_ms, wall.hot_ms, wall.cold_ms) == (16, 10, 10, 10, 10)
    assert not wall.extended


def test_a_maximum_below_the_default_never_shortens_callers_below_it() -> None:
    wall = plan_wall(AssemblySettings(deadline_ms=40, max_deadline_ms=10), 5000.0)
    assert wall.deadline_ms == 40 and not wall.extended


def test_configured_branch_timeouts_scale_with_the_wall() -> None:
    s = AssemblySettings(deadline_ms=40, processing_reserve_ms=6, directive_timeout_ms=5, cold_timeout_ms=20)
    wall = plan_wall(s, 80.0)  # twice the default
    assert (wall.wall_ms, wall.directive_ms, wall.hot_ms, wall.cold_ms) == (68, 10, 30, 40)


def test_the_body_timeout_and_the_headers_soonest_wins() -> None:
    headers = CallerDeadline.from_headers(None, "500")
    assert 450 < (headers.within(900).remaining_ms() or 0) <= 500
    assert 250 < (headers.within(300).remaining_ms() or 0) <= 300
    assert CallerDeadline().within(None).at is None
    absolute = CallerDeadline.from_headers(str(time.time() * 1000 + 200), "900")
    assert 150 < (absolute.remaining_ms() or 0) <= 200
    with pytest.raises(BadRequest):
        CallerDeadline.from_headers(None, "soon")
