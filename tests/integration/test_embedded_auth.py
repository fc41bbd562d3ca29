"""The embedded PostgreSQL lets in only who holds its generated secret.

An older release initialised it with trust authentication and, run as root, a world-writable socket
directory: any local OS user connected as superuser and read every tenant. Now initdb sets SCRAM for
local and TCP connections with a generated password kept 0600 in the data dir, the socket directory
is private to the server's user, and a cluster made by the older release is secured on its next start.
These tests start real servers and connect with the server's own ``psql``, also as another OS user.
"""

from __future__ import annotations

import os
import pwd
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from service.embedded.postgres import EmbeddedPostgres, _pg_bin, free_port

OTHER_USER = "nobody"


def psql(url: str, *, user: str | None = None) -> subprocess.CompletedProcess[str]:
    """``psql -w`` (never prompts) running ``SELECT 1`` as ``user`` (default: this process's user)."""
    return subprocess.run([str(_pg_bin() / "psql"), "-X", "-w", "-At", "-c", "SELECT 1", url],
                          capture_output=True, text=True, timeout=30, user=user,
                          env={"PATH": os.environ.get("PATH", ""), "HOME": "/tmp"})


@pytest.fixture(scope="module")
def pg(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedPostgres]:
    server = EmbeddedPostgres(tmp_path_factory.mktemp("auth") / "postgres", tcp_port=free_port(),
                              shared_buffers="16MB", max_connections=20)
    try:
        server.start()
        yield server
    finally:
        server.stop()


def socket_dir(server: EmbeddedPostgres) -> str:
    """The socket directory and, with a TCP port, the port that names the socket."""
    return server.dsn().rpartition("host=")[2]


def test_secret_is_private_to_its_owner(pg: EmbeddedPostgres) -> None:
    info = pg.secret_file.stat()
    assert stat.S_IMODE(info.st_mode) == 0o600 and info.st_uid == os.geteuid()
    assert len(pg.secret_file.read_text().strip()) >= 32
    assert psql(pg.dsn()).stdout.strip() == "1"  # the DSN carries the secret and works
    assert psql(pg.tcp_dsn()).stdout.strip() == "1"


def test_socket_directory_is_private(pg: EmbeddedPostgres) -> None:
    info = Path(socket_dir(pg).partition("&")[0]).stat()
    assert stat.S_IMODE(info.st_mode) == 0o700
    expected_owner = pwd.getpwnam("embedded_postgres").pw_uid if os.geteuid() == 0 else os.geteuid()
    assert info.st_uid == expected_owner


@pytest.mark.parametrize("password", [None, "wrong-password"])
def test_no_password_or_a_wrong_one_is_refused(pg: EmbeddedPostgres, password: str | None) -> None:
    """Over the socket and over TCP, for the superuser and for a login role (as the service's is)."""
    run = psql(pg.dsn())
    assert run.returncode == 0, run.stderr
    subprocess.run([str(_pg_bin() / "psql"), "-X", "-q", "-c",
                    "DROP ROLE IF EXISTS app_like; CREATE ROLE app_like LOGIN PASSWORD 'right-password'", pg.dsn()],
                   check=True, capture_output=True, timeout=30)
    auth = "" if password is None else f":{password}"
    for role in ("postgres", "app_like"):
        for url in (f"postgresql://{role}{auth}@/postgres?host={socket_dir(pg)}",
                    f"postgresql://{role}{auth}@127.0.0.1:{pg.tcp_port}/postgres"):
            refused = psql(url)
            assert refused.returncode != 0, url
            assert ("password" in refused.stderr), refused.stderr


def test_another_os_user_is_refused(pg: EmbeddedPostgres) -> None:
    """The attack from the report: another local user points psql at the socket directory (refused:
    it cannot even reach the socket), or at the TCP port without the secret (refused by SCRAM)."""
    if os.geteuid() != 0:
        pytest.fail("this test switches to another OS user and so must run as root (as CI does)")
    via_socket = psql(f"postgresql://postgres@/postgres?host={socket_dir(pg)}", user=OTHER_USER)
    assert via_socket.returncode != 0
    assert "Permission denied" in via_socket.stderr or "password" in via_socket.stderr, via_socket.stderr
    via_tcp = psql(f"postgresql://postgres@127.0.0.1:{pg.tcp_port}/postgres", user=OTHER_USER)
    assert via_tcp.returncode != 0 and "password" in via_tcp.stderr, via_tcp.stderr
    secret = subprocess.run(["cat", str(pg.secret_file)], capture_output=True, text=True, user=OTHER_USER)
    assert secret.returncode != 0 and "Permission denied" in secret.stderr


def test_cluster_from_an_older_release_is_secured(tmp_path: Path) -> None:
    """A data dir as the older release left it (trust rules, no secret file) gets a generated secret
    and SCRAM rules on its next start; a password-less connection is then refused."""
    server = EmbeddedPostgres(tmp_path / "postgres", shared_buffers="16MB", max_connections=20)
    try:
        server.start()
        server.stop()
        hba = server.pgdata / "pg_hba.conf"
        hba.write_text(hba.read_text().replace("scram-sha-256", "trust"))
        server.secret_file.unlink()
        server.start()
        assert stat.S_IMODE(server.secret_file.stat().st_mode) == 0o600
        assert "trust" not in [line.split()[-1] for line in hba.read_text().splitlines()
                               if line.split() and not line.startswith("#")]
        assert psql(server.dsn()).stdout.strip() == "1"
        refused = psql(f"postgresql://postgres@/postgres?host={socket_dir(server)}")
        assert refused.returncode != 0 and "password" in refused.stderr, refused.stderr
    finally:
        server.stop()
