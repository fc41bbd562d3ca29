"""Where the embedded servers' Unix sockets live: under the data dir, or, when that path is too long for
a socket (``sun_path`` is 108 bytes), in a private directory under a per-user runtime directory.

The fallback is ``$XDG_RUNTIME_DIR/pgcontext/`` when that directory is private to this user, else
``<tmp>/pgcontext-<uid>/``; inside it, one directory per server and data dir (``pg-<hash>``,
``redis-<hash>``). Each level is created by this process (``mkdir`` fails on anything already there,
a symlink included) or, when it exists, used only if it is a real directory of this user with no
permission for others beyond what is needed (0700; 0711 for the ``/tmp`` level when running as root,
so the Postgres server's own system user can pass through to its socket). Anything else is refused
with the path named: whoever can write in a socket's directory can replace the socket (and answer
for Redis), and a symlink there would turn the start's ``chown``/``chmod`` onto its target.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import pwd
import stat
import tempfile
from pathlib import Path

SOCKET_PATH_MAX = 100
"""``sun_path`` is 108 bytes; a margin for the socket's own name (``.s.PGSQL.5432``, ``redis.sock``)."""


def socket_dir_for(preferred: Path, name: str, *, server_user: str | None = None) -> Path:
    """The directory for server ``name``'s socket: ``preferred`` when short enough, else a private one
    (see the module docstring). ``server_user``: the system user the server runs as when it is not this
    process's (the socket directory may then belong to it)."""
    if len(str(preferred / ".s.PGSQL.5432")) <= SOCKET_PATH_MAX:
        preferred.mkdir(parents=True, exist_ok=True)
        return preferred
    me = os.geteuid()
    owners = {me}
    if server_user is not None:
        with contextlib.suppress(KeyError):
            owners.add(pwd.getpwnam(server_user).pw_uid)
    digest = hashlib.sha256(str(preferred).encode()).hexdigest()[:12]
    return _private_dir(_runtime_dir(server_user) / f"{name}-{digest}", 0o700, owners)


def _runtime_dir(server_user: str | None) -> Path:
    me = os.geteuid()
    xdg = os.environ.get("XDG_RUNTIME_DIR", "")
    # A server running as another user cannot enter a 0700 runtime directory.
    if server_user is None and xdg.startswith("/") and _problem(Path(xdg), {me}, 0o700) is None:
        return _private_dir(Path(xdg) / "pgcontext", 0o700, {me})
    return _private_dir(Path(tempfile.gettempdir()) / f"pgcontext-{me}", 0o711 if me == 0 else 0o700, {me})


def _private_dir(path: Path, mode: int, owners: set[int]) -> Path:
    """``path`` created with ``mode``, or already there and acceptable; RuntimeError otherwise."""
    try:
        os.mkdir(path, 0o700)  # exclusive: fails on anything already there, a dangling symlink included
    except FileExistsError:
        pass
    else:
        # The umask may have narrowed the mode; set it through a descriptor of the directory just made.
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            os.fchmod(fd, mode)
        finally:
            os.close(fd)
    problem = _problem(path, owners, mode)
    if problem is not None:
        raise RuntimeError(
            f"refusing to put the embedded servers' sockets in {path}: {problem}. It must be a directory of "
            f"this user (uid {os.geteuid()}) with mode {mode:#o} at most; remove it, or use a data dir "
            "(PGCONTEXT_DATA_DIR) with a shorter path so the sockets stay under it")
    return path


def _problem(path: Path, owners: set[int], mode: int) -> str | None:
    """Why ``path`` is not a private directory (None: it is one)."""
    try:
        st = os.lstat(path)
    except OSError as exc:
        return f"it cannot be read ({exc.strerror})"
    if stat.S_ISLNK(st.st_mode):
        return "it is a symbolic link"
    if not stat.S_ISDIR(st.st_mode):
        return "it is not a directory"
    if st.st_uid not in owners:
        return f"it belongs to another user (uid {st.st_uid})"
    if stat.S_IMODE(st.st_mode) & ~mode:
        return f"its mode {stat.S_IMODE(st.st_mode):#o} lets other users in"
    return None
