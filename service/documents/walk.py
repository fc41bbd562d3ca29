"""Walk a directory tree for ingestion: the text files git would track, in sorted order.

* ``.gitignore`` files are honoured at every level with git's precedence (pathspec's gitwildmatch
  semantics): a deeper file overrides a shallower one, the last matching line of a file wins, ``!``
  re-includes, and an ignored directory is not entered (so, as in git, nothing under it can be
  re-included). ``.git/info/exclude`` counts as a root-level ignore file.
* ``.git`` (the directory, or the file a submodule/worktree has) is always skipped.
* Version-control metadata is not a document either, so by default it is skipped too: the other
  systems' directories (``.hg``, ``.svn``, ``.bzr``, ``_darcs``, ``.jj``, ``.pijul``, ``CVS``) and
  their files (``.gitignore``, ``.gitattributes``, ``.gitmodules``, ``.hgignore``, ``.hgtags``, ...)
  and other tools' ignore lists (any ``.*ignore`` file: ``.dockerignore``, ``.npmignore``, ...): an
  imported ``.gitignore`` put lines like ``secret.txt`` into agents' contexts. Skipped files are
  reported (reason ``vcs``); ``include_vcs=True`` (``pgcontext import --include-vcs``) walks them.
* Symlinks are never followed: a link may leave the tree or loop.
* Files that cannot be ingested as text are reported to ``on_skip`` with a reason and not yielded:
  over ``max_file_bytes`` (decided from the size, without reading), a NUL byte (binary: git's test
  looks at the first 8 KiB; we look at the whole file, already in memory, because PostgreSQL
  ``text`` cannot store NUL at all), not valid UTF-8, unreadable, not a regular file, a symlink,
  or a name that is not UTF-8 or holds what a document path cannot (a control character, such as
  the ``\\r`` of macOS's ``Icon\\r`` files, or a backslash); a directory of such a name is skipped whole.
  Files ignored by ``.gitignore`` are not reported: ignoring them is the intent.

Order is deterministic: paths come out sorted by their relative posix string.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

import pathspec

SkipReason = Literal["too_large", "binary", "not_utf8", "unreadable", "not_regular", "symlink", "bad_name", "vcs"]

BINARY_SNIFF_BYTES: Final = 8192
PATH_CONTROL_CHARS: Final = "\x00-\x1f\x7f-\x9f\u2028\u2029"
"""What a document path never holds (a regular expression class): C0 and C1 control characters, DEL, and
the line and paragraph separators, each of which breaks a line where the path is written."""
STORED_PATH_CONTROL_CHARS: Final = "\x00-\x1f\x7f"
"""What the path of a stored document never holds (likewise): documents were ingested before C1 controls
and the line separators were refused, and are still deleted and imported by their paths."""
_UNSTORABLE_NAME: Final = re.compile(f"[{PATH_CONTROL_CHARS}\\\\]")
"""Characters a document path cannot hold (the service's 400 ``bad_path``): a macOS ``Icon\\r``, say."""
VCS_DIRS: Final = frozenset({".hg", ".svn", ".bzr", "_darcs", ".jj", ".pijul", "CVS"})
"""Version-control directories skipped unless ``include_vcs`` (``.git`` is skipped always)."""
VCS_FILES: Final = frozenset({".gitattributes", ".gitmodules", ".gitkeep", ".git-blame-ignore-revs", ".hgtags",
                              ".hgsub", ".hgsubstate", ".hgsigs", ".boring"})
"""Version-control files skipped unless ``include_vcs``, besides every ``.*ignore`` file."""


def is_vcs_file(name: str) -> bool:
    """A version-control file or an ignore list (``.gitignore``, ``.hgignore``, ``.dockerignore``, ...)."""
    return name in VCS_FILES or (name.startswith(".") and name.endswith("ignore"))


@dataclass(frozen=True, slots=True)
class WalkedFile:
    """A text file to ingest."""

    path: str
    """Relative to the walk root, posix separators (``service/app.py``)."""
    content: str
    """Decoded UTF-8, newlines untouched: ``content.encode() == file bytes``."""
    size: int
    """Size in bytes."""


@dataclass(frozen=True, slots=True)
class SkippedFile:
    """A file (or unreadable directory, path ending in ``/``) the walk did not yield."""

    path: str
    reason: SkipReason
    detail: str = ""


@dataclass(frozen=True, slots=True)
class _IgnoreFile:
    base: str
    """Directory of the ignore file, relative posix, ``""`` for the root."""
    spec: pathspec.GitIgnoreSpec


def walk_tree(
    root: Path,
    *,
    max_file_bytes: int = 1_000_000,
    on_skip: Callable[[SkippedFile], None] | None = None,
    include_vcs: bool = False,
) -> Iterator[WalkedFile]:
    """Yield the ingestible text files under ``root`` in sorted path order (see the module doc);
    ``include_vcs``: also version-control directories (but ``.git``) and files, and ignore lists."""
    root = Path(root)
    if not root.is_dir():
        raise NotADirectoryError(str(root))

    def skip(path: str, reason: SkipReason, detail: str = "") -> None:
        if on_skip is not None:
            on_skip(SkippedFile(path, reason, detail))

    rules: tuple[_IgnoreFile, ...] = ()
    exclude = _load_ignore_file(root / ".git" / "info" / "exclude", "")
    if exclude is not None:
        rules = (exclude,)
    yield from _walk_dir(root, "", rules, max_file_bytes, skip, include_vcs)


def _walk_dir(
    directory: Path,
    rel_dir: str,
    rules: tuple[_IgnoreFile, ...],
    max_file_bytes: int,
    skip: Callable[[str, SkipReason, str], None],
    include_vcs: bool,
) -> Iterator[WalkedFile]:
    local = _load_ignore_file(directory / ".gitignore", rel_dir)
    if local is not None:
        rules = (*rules, local)
    try:
        with os.scandir(directory) as it:
            entries = [(e, e.is_dir(follow_symlinks=False)) for e in it]
    except OSError as exc:
        skip(f"{rel_dir}/", "unreadable", str(exc))
        return
    # A directory sorts as "name/", which makes per-directory order equal the order of full paths:
    # "a.txt" < "a/b" because "." < "/".
    entries.sort(key=lambda pair: pair[0].name + "/" if pair[1] else pair[0].name)
    for entry, is_dir in entries:
        if entry.name == ".git" or (is_dir and not include_vcs and entry.name in VCS_DIRS):
            continue
        rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
        if _is_ignored(rules, rel, is_dir=is_dir):
            continue
        if not is_dir and not include_vcs and is_vcs_file(entry.name):
            skip(rel, "vcs", "version-control metadata (--include-vcs imports it)")
            continue
        try:
            rel.encode("utf-8")
        except UnicodeEncodeError:
            skip(rel.encode("utf-8", "surrogateescape").decode("utf-8", "replace"), "bad_name", "")
            continue
        if _UNSTORABLE_NAME.search(entry.name):
            # The service refuses such a path (400): sending it would fail the import on every run.
            skip(_shown(rel) + ("/" if is_dir else ""), "bad_name",
                 "a control character or backslash in the name (document paths cannot hold one)")
            continue
        if is_dir:
            yield from _walk_dir(Path(entry.path), rel, rules, max_file_bytes, skip, include_vcs)
            continue
        walked = _read_entry(entry, rel, max_file_bytes, skip)
        if walked is not None:
            yield walked


def _read_entry(
    entry: os.DirEntry[str],
    rel: str,
    max_file_bytes: int,
    skip: Callable[[str, SkipReason, str], None],
) -> WalkedFile | None:
    if entry.is_symlink():
        skip(rel, "symlink", "")
        return None
    if not entry.is_file(follow_symlinks=False):
        skip(rel, "not_regular", "")
        return None
    try:
        size = entry.stat(follow_symlinks=False).st_size
        if size > max_file_bytes:
            skip(rel, "too_large", f"{size} bytes > {max_file_bytes}")
            return None
        with open(entry.path, "rb") as handle:
            # Read one byte past the limit so a file that grew since stat() is still caught.
            data = handle.read(max_file_bytes + 1)
    except OSError as exc:
        skip(rel, "unreadable", str(exc))
        return None
    if len(data) > max_file_bytes:
        skip(rel, "too_large", f"more than {max_file_bytes} bytes")
        return None
    if b"\x00" in data:
        where = "in the first 8 KiB" if b"\x00" in data[:BINARY_SNIFF_BYTES] else "after the first 8 KiB"
        skip(rel, "binary", f"NUL byte {where}")
        return None
    try:
        content = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        skip(rel, "not_utf8", f"invalid UTF-8 at byte {exc.start}")
        return None
    return WalkedFile(path=rel, content=content, size=len(data))


def _shown(rel: str) -> str:
    """``rel`` with its control characters escaped, for a report line (``Icon\\r``)."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in rel)


def _load_ignore_file(path: Path, base: str) -> _IgnoreFile | None:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None  # absent (the usual case) or unreadable: nothing to honour
    # As git does, skip a byte order mark (editors on Windows write one): else the first rule, often
    # the one that keeps `.env` or `node_modules/` out, would not match anything.
    return _IgnoreFile(base, pathspec.GitIgnoreSpec.from_lines(text.removeprefix("\ufeff").splitlines()))


def _is_ignored(rules: Sequence[_IgnoreFile], rel: str, *, is_dir: bool) -> bool:
    """Git precedence: the deepest ignore file with a matching line decides."""
    for rule in reversed(rules):
        sub = rel[len(rule.base) + 1 :] if rule.base else rel
        if is_dir:
            sub += "/"  # so that directory-only patterns (`build/`) match
        decision = rule.spec.check_file(sub).include
        if decision is not None:
            return decision
    return False
