"""Files the service writes and reads back later (secrets, pid files, server configuration, caches):
whole or not at all, and still there after the file system crashes.

A file is written to a temporary name beside it (created exclusively, with its final mode from the
start), fsynced, renamed over the target, and then the directory is fsynced so the rename itself is
on disk. Without the last two steps a crash of the file system seconds after a write can leave the
target empty or missing although the write "succeeded" (an empty superuser secret locked ``serve``
out of its own cluster for good).
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Callable
from pathlib import Path


def fsync_dir(directory: Path) -> None:
    """Make the directory's entries (a file created, renamed or removed in it) durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _temporary(target: Path, suffix: str = "") -> Path:
    # Unique per writer: processes racing to write the same file (two starts) never share a temp file.
    return target.with_name(f".{target.name}.{os.getpid()}.{uuid.uuid4().hex[:12]}.tmp{suffix}")


def write_atomically(target: Path, data: str | bytes, *, mode: int = 0o644,
                     owner: tuple[int, int] | None = None) -> None:
    """Replace ``target`` with ``data``: readers see the old file or the new one, never a part; created
    with ``mode`` (e.g. 0600 for a secret, never briefly wider) and ``owner`` (uid, gid) if given (a
    server's file rewritten by root stays its server's)."""
    payload = data.encode() if isinstance(data, str) else data
    tmp = _temporary(target)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        if owner is not None:
            os.fchown(fd, *owner)
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    fsync_dir(target.parent)


def replace_atomically(target: Path, write: Callable[[Path], None], *, suffix: str = "") -> None:
    """Like :func:`write_atomically` for a writer that needs a path (a library saving a file):
    ``write`` fills a temporary path beside ``target`` (ending in ``suffix``, which some libraries read
    the format from), which is then fsynced and renamed over ``target``."""
    tmp = _temporary(target, suffix)
    try:
        write(tmp)
        with tmp.open("rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, target)
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()
    fsync_dir(target.parent)
