"""Who owns an embedded server: pid files that survive a ``kill -9`` and tell a live owner from a dead one.

A process that starts (or adopts) an embedded server records itself in ``owner.pid`` beside the
server's data. The next process to find the server running attaches to it while that owner lives
(a CLI command beside ``pgcontext serve``) and adopts it when the owner is gone (``serve`` killed
with ``kill -9``), so that its own clean-up stops the server. Pids are recorded with the process's
start time, so a pid reused by an unrelated process is not taken for the owner.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import structlog

from service.files import write_atomically

log = structlog.get_logger(__name__)


def _start_ticks(pid: int) -> int | None:
    """The process's start time (clock ticks after boot), or None when it is gone or a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()  # the command name in parentheses may hold spaces
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


@dataclass(frozen=True)
class ProcessId:
    pid: int
    started: int

    @classmethod
    def of(cls, pid: int) -> ProcessId | None:
        started = _start_ticks(pid)
        return None if started is None else cls(pid, started)

    @classmethod
    def current(cls) -> ProcessId:
        me = cls.of(os.getpid())
        assert me is not None
        return me

    def alive(self) -> bool:
        return _start_ticks(self.pid) == self.started

    def cmdline(self) -> str:
        try:
            return Path(f"/proc/{self.pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            return ""


def read_pid_file(path: Path) -> ProcessId | None:
    try:
        pid, started = path.read_text().split()[:2]
        return ProcessId(int(pid), int(started))
    except (OSError, ValueError):
        return None


def write_pid_file(path: Path, process: ProcessId) -> None:
    write_atomically(path, f"{process.pid} {process.started}\n")


def live_owner(directory: Path) -> ProcessId | None:
    """The recorded owner of the server in ``directory`` if it is still running (this process included:
    a second handle on a server it started attaches too)."""
    owner = read_pid_file(directory / "owner.pid")
    if owner is None or not owner.alive():
        return None
    return owner


def claim(directory: Path) -> None:
    write_pid_file(directory / "owner.pid", ProcessId.current())


def release(directory: Path) -> None:
    owner = read_pid_file(directory / "owner.pid")
    if owner is not None and owner.pid == os.getpid():
        remove(directory / "owner.pid")


def remove(path: Path) -> None:
    """Remove a record; on a volume that went read-only it stays, naming a process that is gone (the
    next start reads it as a dead owner), and stopping goes on."""
    try:
        path.unlink(missing_ok=True)
    except OSError as exc:
        log.warning("embedded_record_not_removed", path=str(path), error=str(exc))


@contextlib.contextmanager
def locked(directory: Path) -> Iterator[None]:
    """Serialize start / adopt / stop decisions of processes sharing one server directory.

    On a volume that went read-only the lock file cannot be created or opened for writing; an existing
    one is locked through a read-only descriptor (``flock`` needs no write access), and without one the
    block runs unlocked: stopping a server must not depend on writing a file (a start fails anyway, at
    its first write)."""
    with contextlib.suppress(FileExistsError):  # on a read-only volume mkdir may say so, existing or not
        directory.mkdir(parents=True, exist_ok=True)
    handle = _open_lock(directory / ".lock")
    if handle is None:
        yield
        return
    with handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _open_lock(path: Path) -> IO[str] | None:
    try:
        return open(path, "a")
    except OSError as exc:
        try:
            return open(path)
        except OSError:
            log.warning("embedded_lock_unavailable", path=str(path), error=str(exc))
            return None
