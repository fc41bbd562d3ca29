"""Path globs stay cheap for the database: repeats of ``**/`` (and runs of ``*``) are one wildcard, and a
glob of more than ``MAX_WILDCARDS`` wildcards is the caller's 400, not a search that times out (503)."""

from __future__ import annotations

import re

import pytest

from service.documents.globs import MAX_WILDCARDS, compile_path, path_score
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


@pytest.mark.parametrize(("pattern", "paths"), [
    ("app/[slug]/page.tsx", {"app/[slug]/page.tsx": 1.0, "app/s/page.tsx": 0.8, "app/x/page.tsx": None}),
    ("[id].tsx", {"pages/[id].tsx": 0.9, "[id].tsx": 1.0, "pages/i.tsx": 0.8, "pages/[id]x.tsx": None}),
    ("notes/what?.md", {"notes/what?.md": 1.0, "notes/whatx.md": 0.8}),
    ("src/[lib]/", {"src/[lib]/a.py": 0.8, "src/l/a.py": 0.8, "src/x/a.py": None}),
])
def test_a_file_whose_name_holds_glob_characters_is_found_by_its_path(
        pattern: str, paths: dict[str, float | None]) -> None:
    """Next.js and SvelteKit route files are named `[id].tsx`: their own path used to match only other
    files (`[id]` read as a class), never them."""
    compiled = compile_path(pattern)
    assert compiled is not None
    for path, score in paths.items():
        matched = re.search(compiled.regex, path) is not None and path.startswith(compiled.like.rstrip("%"))
        assert matched is (score is not None), path
        if score is not None:
            assert path_score(compiled, path) == score, path
