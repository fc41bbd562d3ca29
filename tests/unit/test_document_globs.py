"""Path globs stay cheap for the database: repeats of ``**/`` (and runs of ``*``) are one wildcard, and a
glob of more than ``MAX_WILDCARDS`` wildcards is the caller's 400, not a search that times out (503)."""

from __future__ import annotations

import re

import pytest

from service.documents.globs import MAX_WILDCARDS, compile_path
from service.errors import BadRequest


@pytest.mark.parametrize(("glob", "same_as"), [("**/" * 333 + "x.py", "**/x.py"), ("a/**/**/b.py", "a/**/b.py"),
                                                ("a/****/b.py", "a/**/b.py"), ("src/***", "src/**")])
def test_repeated_wildcards_compile_as_one(glob: str, same_as: str) -> None:
    assert compile_path(glob) == compile_path(same_as)


def test_a_glob_of_too_many_wildcards_is_a_400() -> None:
    assert compile_path("*a" * MAX_WILDCARDS) is not None
    with pytest.raises(BadRequest) as caught:
        compile_path("*a" * (MAX_WILDCARDS + 1))
    assert caught.value.code == "validation_error" and "wildcards" in caught.value.message


def test_collapsing_keeps_what_matches() -> None:
    one = compile_path("**/x.py")
    assert one is not None
    for path, matches in (("x.py", True), ("a/b/x.py", True), ("a/bx.py", False)):
        assert bool(re.search(one.regex, path)) is matches, path
