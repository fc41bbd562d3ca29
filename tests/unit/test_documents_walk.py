"""walk_tree: .gitignore semantics, skipped files with reasons, deterministic order."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from service.documents.walk import SkippedFile, WalkedFile, walk_tree


def write(root: Path, rel: str, data: str | bytes) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, bytes):
        path.write_bytes(data)
    else:
        path.write_bytes(data.encode("utf-8"))


def walk(root: Path, *, max_file_bytes: int = 1_000_000, include_vcs: bool = False
         ) -> tuple[list[WalkedFile], list[SkippedFile]]:
    skipped: list[SkippedFile] = []
    files = list(walk_tree(root, on_skip=skipped.append, max_file_bytes=max_file_bytes, include_vcs=include_vcs))
    return files, skipped


def paths(root: Path, *, include_vcs: bool = False) -> list[str]:
    return [f.path for f in walk(root, include_vcs=include_vcs)[0]]


def test_root_gitignore_with_negation_and_directories(tmp_path: Path) -> None:
    write(tmp_path, ".gitignore", "*.log\n!keep.log\nbuild/\n/only_root.txt\n# comment\n")
    write(tmp_path, "app.py", "print(1)\n")
    write(tmp_path, "debug.log", "x\n")
    write(tmp_path, "keep.log", "kept\n")
    write(tmp_path, "build/out.py", "x\n")
    write(tmp_path, "src/build/gen.py", "x\n")  # `build/` matches at any depth
    write(tmp_path, "only_root.txt", "x\n")
    write(tmp_path, "src/only_root.txt", "anchored pattern does not reach here\n")
    assert paths(tmp_path) == ["app.py", "keep.log", "src/only_root.txt"]


def test_nested_gitignore_overrides_and_is_relative(tmp_path: Path) -> None:
    write(tmp_path, ".gitignore", "*.log\nsecret*\n")
    write(tmp_path, "pkg/.gitignore", "!important.log\n/local/\ngenerated.py\n!secret_ok.txt\n")
    write(tmp_path, "pkg/important.log", "re-included by the deeper file\n")
    write(tmp_path, "pkg/other.log", "still ignored by the root file\n")
    write(tmp_path, "pkg/local/x.py", "anchored to pkg/\n")
    write(tmp_path, "pkg/sub/local/y.py", "/local/ is anchored, so this stays\n")
    write(tmp_path, "pkg/sub/generated.py", "unanchored name matches below pkg/\n")
    write(tmp_path, "generated.py", "pkg's rules do not apply at the root\n")
    write(tmp_path, "pkg/secret_ok.txt", "negated\n")
    write(tmp_path, "pkg/secret.txt", "ignored\n")
    write(tmp_path, "important.log", "the root file still ignores it here\n")
    assert paths(tmp_path) == [
        "generated.py",
        "pkg/important.log",
        "pkg/secret_ok.txt",
        "pkg/sub/local/y.py",
    ]


def test_file_under_ignored_directory_cannot_be_reincluded(tmp_path: Path) -> None:
    write(tmp_path, ".gitignore", "vendor/\n!vendor/keep.py\n")
    write(tmp_path, "vendor/keep.py", "x\n")
    write(tmp_path, "vendor/.gitignore", "!keep.py\n")
    assert paths(tmp_path, include_vcs=True) == [".gitignore"]


def test_git_dir_and_info_exclude(tmp_path: Path) -> None:
    write(tmp_path, ".git/config", "[core]\n")
    write(tmp_path, ".git/info/exclude", "local-notes.md\n")
    write(tmp_path, "local-notes.md", "excluded via .git/info/exclude\n")
    write(tmp_path, "sub/.git", "gitdir: ../.git/modules/sub\n")  # a submodule's .git file
    write(tmp_path, "sub/code.py", "x = 1\n")
    assert paths(tmp_path) == ["sub/code.py"]


def test_binary_undecodable_and_large_files_are_skipped_with_reasons(tmp_path: Path) -> None:
    write(tmp_path, "image.png", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    write(tmp_path, "latin1.txt", "caf\xe9\n".encode("latin-1"))
    write(tmp_path, "big.txt", "x" * 101)
    write(tmp_path, "exact.txt", "y" * 100)
    # Past git's 8 KiB sniff window, but PostgreSQL text cannot hold NUL: still binary.
    write(tmp_path, "late_nul.txt", "a" * 9000 + "\x00")
    files, skipped = walk(tmp_path, max_file_bytes=10_000)
    assert [f.path for f in files] == ["big.txt", "exact.txt"]
    assert {s.path: s.reason for s in skipped} == {
        "image.png": "binary",
        "late_nul.txt": "binary",
        "latin1.txt": "not_utf8",
    }
    files, skipped = walk(tmp_path, max_file_bytes=100)
    assert [f.path for f in files] == ["exact.txt"]
    reasons = {s.path: s.reason for s in skipped}
    assert reasons == {
        "big.txt": "too_large",
        "image.png": "binary",
        "late_nul.txt": "too_large",
        "latin1.txt": "not_utf8",
    }


def test_content_is_exact_bytes(tmp_path: Path) -> None:
    raw = "\ufeffcrlf\r\nline\r\nno final newline é".encode()
    write(tmp_path, "a.txt", raw)
    [walked] = walk(tmp_path)[0]
    assert walked.content.encode("utf-8") == raw
    assert walked.size == len(raw)


def test_ignored_files_are_not_reported(tmp_path: Path) -> None:
    write(tmp_path, ".gitignore", "*.bin\n")
    write(tmp_path, "blob.bin", b"\x00\x01")
    assert walk(tmp_path, include_vcs=True)[1] == []


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="no symlinks")
def test_symlinks_are_not_followed(tmp_path: Path) -> None:
    write(tmp_path, "real/a.py", "x\n")
    (tmp_path / "link.py").symlink_to(tmp_path / "real" / "a.py")
    (tmp_path / "loop").symlink_to(tmp_path, target_is_directory=True)
    files, skipped = walk(tmp_path)
    assert [f.path for f in files] == ["real/a.py"]
    assert {s.path: s.reason for s in skipped} == {"link.py": "symlink", "loop": "symlink"}


def test_order_is_sorted_by_full_path(tmp_path: Path) -> None:
    for rel in ["a/b.txt", "a.txt", "a-b.txt", "B.txt", "a/a/z.txt", "a0.txt", "z/y/x.txt"]:
        write(tmp_path, rel, "x\n")
    result = paths(tmp_path)
    assert result == sorted(result)
    assert result == ["B.txt", "a-b.txt", "a.txt", "a/a/z.txt", "a/b.txt", "a0.txt", "z/y/x.txt"]


def test_root_must_be_a_directory(tmp_path: Path) -> None:
    write(tmp_path, "f.txt", "x")
    with pytest.raises(NotADirectoryError):
        list(walk_tree(tmp_path / "f.txt"))


def test_is_lazy_and_deterministic(tmp_path: Path) -> None:
    for i in range(30):
        write(tmp_path, f"d{i % 3}/f{i}.md", f"# {i}\n")
    first = paths(tmp_path)
    assert first == paths(tmp_path) and len(first) == 30
    iterator = walk_tree(tmp_path)
    assert next(iterator).path == "d0/f0.md"


def test_version_control_metadata_and_ignore_lists_are_skipped_unless_asked_for(tmp_path: Path) -> None:
    write(tmp_path, ".gitignore", "secret.txt\n")
    write(tmp_path, ".gitattributes", "*.py diff=python\n")
    write(tmp_path, "web/.dockerignore", "node_modules\n")
    write(tmp_path, ".hgignore", "syntax: glob\n*.pyc\n")
    write(tmp_path, ".hg/hgrc", "[paths]\n")
    write(tmp_path, ".svn/entries", "12\n")
    write(tmp_path, ".git/HEAD", "ref: refs/heads/main\n")
    write(tmp_path, "app.py", "def grind(self, size): return size\n")
    write(tmp_path, "docs/ignore-me-not.md", "an ordinary file whose name mentions ignore\n")
    files, skipped = walk(tmp_path)
    assert [f.path for f in files] == ["app.py", "docs/ignore-me-not.md"]
    assert sorted((s.path, s.reason) for s in skipped) == [
        (".gitattributes", "vcs"), (".gitignore", "vcs"), (".hgignore", "vcs"), ("web/.dockerignore", "vcs")]
    # Asked for, they are imported (and .gitignore still rules what is ignored); .git never is.
    assert paths(tmp_path, include_vcs=True) == [
        ".gitattributes", ".gitignore", ".hg/hgrc", ".hgignore", ".svn/entries", "app.py", "docs/ignore-me-not.md",
        "web/.dockerignore"]


def test_names_a_document_path_cannot_hold_are_skipped_not_sent(tmp_path: Path) -> None:
    """The service answers 400 to a path with a control character or a backslash: such a file (a macOS
    ``Icon\\r``, say) or directory is reported as ``bad_name`` instead of failing every import."""
    write(tmp_path, "Icon\r", "")
    write(tmp_path, "back\\slash.txt", "x\n")
    write(tmp_path, "tab\tdir/inside.txt", "x\n")
    write(tmp_path, "next\x85line.md", "x\n")
    write(tmp_path, "line\u2028sep.md", "x\n")
    write(tmp_path, "ok é.txt", "kept\n")
    files, skipped = walk(tmp_path)
    assert [f.path for f in files] == ["ok é.txt"]
    assert {s.path: s.reason for s in skipped} == {
        "Icon\\r": "bad_name", "back\\slash.txt": "bad_name", "tab\\tdir/": "bad_name",
        "next\\x85line.md": "bad_name", "line\\u2028sep.md": "bad_name"}


def test_an_ignore_file_with_a_byte_order_mark_keeps_its_first_rule(tmp_path: Path) -> None:
    """git skips the BOM an editor on Windows puts at the start of .gitignore; read with it, the first
    rule (`.env` here) matched nothing and the secrets file was imported."""
    write(tmp_path, ".gitignore", "\ufeff.env\r\nnode_modules/\r\n")
    write(tmp_path, "pkg/.gitignore", "\ufeffbuild/\n")
    write(tmp_path, ".env", "API_KEY=secret\n")
    write(tmp_path, "pkg/build/out.js", "x\n")
    write(tmp_path, "app.py", "print(1)\n")
    assert paths(tmp_path) == ["app.py"]
