"""Ownership records on a volume that went read-only: stopping must still stop the servers, even though
the lock file cannot be opened for writing and the owner's pid file cannot be removed."""

from __future__ import annotations

import errno
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from service.embedded import ownership

_real_open = open


@pytest.fixture
def read_only(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Opening for writing and removing files fail with EROFS, as on a volume the kernel remounted
    read-only after an I/O error (reading still works)."""

    def fake_open(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        if any(c in mode for c in "wax+"):
            raise OSError(errno.EROFS, "Read-only file system", str(file))
        return _real_open(file, mode, *args, **kwargs)

    def fake_unlink(self: Path, missing_ok: bool = False) -> None:
        raise OSError(errno.EROFS, "Read-only file system", str(self))

    monkeypatch.setattr(ownership, "open", fake_open, raising=False)
    monkeypatch.setattr(Path, "unlink", fake_unlink)
    yield


@pytest.mark.parametrize("lock_exists", [True, False], ids=["lock-file-exists", "no-lock-file"])
def test_locked_still_runs_its_block_on_a_read_only_volume(tmp_path: Path, read_only: None,
                                                           lock_exists: bool) -> None:
    if lock_exists:
        with _real_open(tmp_path / ".lock", "a"):
            pass
    ran = []
    with ownership.locked(tmp_path):
        ran.append(True)
    assert ran == [True]


def test_release_on_a_read_only_volume_does_not_raise(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ownership.claim(tmp_path)
    monkeypatch.setattr(Path, "unlink", lambda self, missing_ok=False: (_ for _ in ()).throw(
        OSError(errno.EROFS, "Read-only file system", str(self))))
    ownership.release(tmp_path)  # the server is stopped: a pid file left behind names a dead owner
    assert (tmp_path / "owner.pid").exists()
