"""Where the embedded servers' Unix sockets go when the data dir's path is too long for one: a private
directory under a per-user runtime directory, created by this process or refused. A directory another
local user made first (or a symlink, or a world-writable directory) is never used: whoever can write
there can replace the socket and stand in for Redis, or (as root) have the start chown its target."""

from __future__ import annotations

import os
import pwd
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from service.embedded.sockets import socket_dir_for

NOBODY = pwd.getpwnam("nobody").pw_uid


@pytest.fixture
def tmp_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A private stand-in for /tmp (world-writable and sticky like it), and no XDG_RUNTIME_DIR."""
    assert os.geteuid() == 0, "these tests create directories as another user (nobody): run them as root"
    root = tmp_path / "tmp"
    root.mkdir()
    root.chmod(0o1777)
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    yield root


@pytest.fixture
def long_data_dir(tmp_path: Path) -> Path:
    """A data dir whose socket path would not fit in ``sun_path`` (108 bytes)."""
    return tmp_path / ("d" * 120) / "run"


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def test_a_short_data_dir_keeps_its_sockets(tmp_path: Path, tmp_root: Path) -> None:
    assert socket_dir_for(tmp_path / "run", "redis") == tmp_path / "run"
    assert list(tmp_root.iterdir()) == []


@pytest.mark.parametrize("server_user", [None, "nobody"], ids=["own-server", "server-runs-as-another-user"])
def test_the_fallback_is_private_and_stable(tmp_root: Path, long_data_dir: Path, server_user: str | None) -> None:
    first = socket_dir_for(long_data_dir, "pg", server_user=server_user)
    assert first.parent == tmp_root / f"pgcontext-{os.geteuid()}"
    # As root, the Postgres server's own user may only pass through the parent (to reach its socket).
    assert mode(first.parent) == (0o711 if os.geteuid() == 0 else 0o700)
    assert mode(first) == 0o700 and first.lstat().st_uid == os.geteuid()
    assert socket_dir_for(long_data_dir, "pg", server_user=server_user) == first
    other = socket_dir_for(long_data_dir.parent / "other" / "run", "pg", server_user=server_user)
    assert other != first and other.parent == first.parent


def test_a_directory_the_server_user_was_given_is_still_ours(tmp_root: Path, long_data_dir: Path) -> None:
    """As root, the Postgres start hands the socket directory to the server's system user."""
    first = socket_dir_for(long_data_dir, "pg", server_user="nobody")
    os.chown(first, NOBODY, -1)
    assert socket_dir_for(long_data_dir, "pg", server_user="nobody") == first


def test_the_xdg_runtime_dir_is_used_when_private(tmp_root: Path, tmp_path: Path, long_data_dir: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    xdg = tmp_path / "xdg"
    xdg.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(xdg))
    assert socket_dir_for(long_data_dir, "redis").parent == xdg / "pgcontext"
    # A server running as another user cannot enter a 0700 runtime dir: then the fallback under /tmp.
    assert socket_dir_for(long_data_dir, "pg", server_user="nobody").parent == tmp_root / f"pgcontext-{os.geteuid()}"


def test_an_xdg_runtime_dir_of_someone_else_is_not_used(tmp_root: Path, tmp_path: Path, long_data_dir: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    xdg = tmp_path / "xdg"
    xdg.mkdir(mode=0o777)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(xdg))
    assert socket_dir_for(long_data_dir, "redis").parent == tmp_root / f"pgcontext-{os.geteuid()}"


def _owned_by_nobody(path: Path) -> None:
    path.mkdir(mode=0o700)
    os.chown(path, NOBODY, -1)


def _symlink_to_a_victim(path: Path) -> None:
    victim = path.parent.parent / "victim"
    victim.mkdir(mode=0o755)
    path.symlink_to(victim)


def _world_writable(path: Path) -> None:
    path.mkdir()
    path.chmod(0o777)


def _group_readable(path: Path) -> None:
    path.mkdir()
    path.chmod(0o750)


def _a_file(path: Path) -> None:
    path.write_text("")


PREPARED = {"owned by nobody": _owned_by_nobody, "a symlink": _symlink_to_a_victim,
            "world-writable": _world_writable, "group-readable": _group_readable, "a file": _a_file}


@pytest.mark.parametrize("prepare", PREPARED.values(), ids=PREPARED.keys())
@pytest.mark.parametrize("level", ["runtime dir", "socket dir"])
def test_a_directory_made_by_someone_else_is_refused(tmp_root: Path, long_data_dir: Path, level: str,
                                                     prepare: object) -> None:
    if level == "runtime dir":
        target = tmp_root / f"pgcontext-{os.geteuid()}"
    else:  # where a first start puts it, made again by someone else
        target = socket_dir_for(long_data_dir, "redis")
        target.rmdir()
    prepare(target)  # type: ignore[operator]
    before = {p: (p.lstat().st_uid, mode(p)) for p in tmp_root.parent.rglob("*")}
    with pytest.raises(RuntimeError, match=str(target)):
        socket_dir_for(long_data_dir, "redis")
    # Nothing was changed on the way: no chmod, no chown, nothing created inside.
    assert {p: (p.lstat().st_uid, mode(p)) for p in tmp_root.parent.rglob("*")} == before


def test_the_old_shared_name_under_tmp_is_never_used(tmp_root: Path, long_data_dir: Path) -> None:
    """The predictable name the servers used to share in /tmp, pre-created by another user."""
    import hashlib

    old = tmp_root / f"pgcontext-redis-{hashlib.sha256(str(long_data_dir).encode()).hexdigest()[:12]}"
    _owned_by_nobody(old)
    chosen = socket_dir_for(long_data_dir, "redis")
    assert chosen != old and old not in chosen.parents
