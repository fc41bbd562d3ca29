"""The ``pgcontext`` command, run as a user runs it: in a subprocess, against real servers."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit
from uuid import UUID

import httpx
import pytest
from alembic.script import ScriptDirectory
from litestar.testing import AsyncTestClient

from service.app import create_app
from service.db import migrate
from service.embedded.postgres import free_port
from service.embeddings import Embedder
from service.runtime import Endpoints
from service.settings import Settings
from tests.servers import fresh_database

ROOT = Path(__file__).resolve().parents[2]
_SCRIPT = shutil.which("pgcontext", path=str(Path(sys.executable).parent))
PGCONTEXT = [_SCRIPT] if _SCRIPT else [sys.executable, "-m", "service.cli"]
"""The installed console script (``make install``), or the same entry point run as a module."""


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("PGCONTEXT_") and k not in ("DATABASE_URL", "REDIS_URL")}
    env["PGCONTEXT_LOG_LEVEL"] = "warning"
    env.update(extra)
    return env


def run(env: dict[str, str], *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([*PGCONTEXT, *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    if ok:
        assert result.returncode == 0, f"{args}: {result.stdout}\n{result.stderr}"
    return result


def with_database(dsn: str, database: str) -> str:
    parts = urlsplit(dsn)
    return urlunsplit((parts.scheme, parts.netloc, f"/{database}", parts.query, parts.fragment))


@pytest.fixture(scope="module")
def cli_db(pg_server: str) -> Iterator[str]:
    """An empty database: the CLI itself migrates it on first use."""
    with fresh_database(pg_server) as dsn:
        yield dsn


async def test_orgs_and_keys(cli_db: str, app_dsn: str, redis_url: str, settings: Settings,
                             embedder: Embedder) -> None:
    env = clean_env(PGCONTEXT_DATABASE_URL=cli_db)
    out = run(env, "orgs", "create", "acme").stdout.strip()
    org_id = UUID(out.splitlines()[-1])
    dup = run(env, "orgs", "create", "acme", ok=False)
    assert dup.returncode == 2 and "already exists" in dup.stderr

    created = run(env, "keys", "create", "--org", "acme", "--name", "ci").stdout
    key = created.strip().splitlines()[-1]
    assert key.startswith("pgc_") and str(org_id) in created
    missing = run(env, "keys", "create", "--org", "no-such-org", ok=False)
    assert missing.returncode == 2 and "no org named" in missing.stderr

    # The key authenticates against an app on that database (same service-role password as the session's).
    database = urlsplit(cli_db).path.lstrip("/")
    endpoints = Endpoints(owner_dsn=cli_db, app_dsn=with_database(app_dsn, database), redis_url=redis_url)
    app = create_app(settings, endpoints, embedder=embedder)
    headers = {"Authorization": f"Bearer {key}"}
    async with AsyncTestClient(app=app) as client:
        r = await client.post("/v1/memories", json={"text": "Made with a CLI-issued key."}, headers=headers)
        assert r.status_code == 201, r.text
        assert (await client.get(f"/v1/memories/{r.json()['ids'][0]}", headers=headers)).status_code == 200

        revoked = run(env, "keys", "revoke", key).stdout
        assert "revoked key" in revoked
        assert (await client.get("/v1/memories", headers=headers)).status_code == 401
    again = run(env, "keys", "revoke", key, ok=False)
    assert again.returncode == 2 and "no active key" in again.stderr


def test_migrate_says_from_which_revision_to_which(pg_server: str) -> None:
    script = ScriptDirectory.from_config(migrate.alembic_config(""))  # type: ignore[arg-type]
    head = script.get_current_head()
    assert head is not None
    before_head = script.get_revision(head).down_revision
    assert isinstance(before_head, str)
    with fresh_database(pg_server) as dsn:
        env = clean_env(PGCONTEXT_DATABASE_URL=dsn)
        steps = [(("migrate", "--revision", before_head), f"schema migrated from base (empty) to {before_head}"),
                 (("migrate",), f"schema migrated from {before_head} to {head} (head)"),
                 (("migrate",), f"schema already at head ({head})"),  # idempotent at head
                 (("migrate", "--downgrade", before_head), f"schema migrated from {head} (head) to {before_head}")]
        for args, line in steps:
            result = run(env, *args)
            assert (result.stdout, result.stderr) == (line + "\n", ""), args


class Output:
    """Collects a process's stdout lines on a thread (so the pipe never fills)."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.lines: list[str] = []
        assert proc.stdout is not None
        stream = proc.stdout
        self._thread = threading.Thread(target=lambda: self.lines.extend(stream), daemon=True)
        self._thread.start()

    def text(self) -> str:
        return "".join(self.lines)


def wait_until_answering(proc: subprocess.Popen[str], out: Output, url: str, timeout_s: float = 120) -> None:
    """Wait until ``url`` answers 200, failing with the process's output if it exits or takes too long."""
    deadline = time.monotonic() + timeout_s
    while True:
        assert proc.poll() is None, f"serve exited early:\n{out.text()}"
        assert time.monotonic() < deadline, f"serve did not answer {url} in time:\n{out.text()}"
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)


def processes_mentioning(needle: str) -> dict[int, str]:
    found: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if needle in cmdline:
            found[int(entry.name)] = cmdline
    return found


def children_of(pid: int) -> set[int]:
    kids: set[int] = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        if ppid == pid:
            kids |= {int(entry.name), *children_of(int(entry.name))}
    return kids


def copy_models(source: Path, target: Path) -> None:
    """Reuse the already-built ONNX model (hard links when possible) so the first start is quick."""
    target.mkdir(parents=True, exist_ok=True)
    for f in source.glob("*.onnx"):
        try:
            os.link(f, target / f.name)
        except OSError:
            shutil.copy2(f, target / f.name)


def test_serve_embedded_end_to_end(tmp_path: Path, settings: Settings) -> None:
    data_dir = tmp_path / "data"
    copy_models(settings.data_dir / "models", data_dir / "models")
    port = free_port()
    env = clean_env(PGCONTEXT_DATA_DIR=str(data_dir), PGCONTEXT_PORT=str(port))
    proc = subprocess.Popen([*PGCONTEXT, "serve"], env=env, cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    out = Output(proc)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until_answering(proc, out, f"{base}/healthz")
        match = re.search(r"Its API key \(shown once\):\n(\S+)\n", out.text())
        assert match, out.text()
        key = match.group(1)
        headers = {"Authorization": f"Bearer {key}"}
        assert httpx.get(f"{base}/readyz", timeout=5).status_code == 200

        r = httpx.post(f"{base}/v1/memories", json={"text": "Served by the embedded default."}, headers=headers,
                       timeout=30)
        assert r.status_code == 201, r.text
        memory_id = r.json()["ids"][0]
        r = httpx.get(f"{base}/v1/memories/{memory_id}", headers=headers, timeout=10)
        assert r.status_code == 200 and r.json()["text"] == "Served by the embedded default."

        # A second org, made by the CLI attached to the running embedded server.
        run(env, "orgs", "create", "second")
        other_key = run(env, "keys", "create", "--org", "second").stdout.strip().splitlines()[-1]
        r = httpx.get(f"{base}/v1/memories/{memory_id}", headers={"Authorization": f"Bearer {other_key}"},
                      timeout=10)
        assert r.status_code == 404, r.text
        assert proc.poll() is None  # the CLI commands did not stop the servers serve started

        servers = processes_mentioning(str(data_dir)) | dict.fromkeys(children_of(proc.pid), "child")
        servers.pop(proc.pid, None)
        assert any("postgres" in c for c in servers.values()), servers
        assert len(servers) >= 2, servers  # postgres and redis
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert proc.returncode == 0, out.text()
    deadline = time.monotonic() + 10
    while True:
        alive = {pid for pid in servers if Path(f"/proc/{pid}").exists()
                 and "zombie" not in _state(pid)}
        if not alive and not processes_mentioning(str(data_dir)):
            break
        assert time.monotonic() < deadline, f"left behind: {alive} {processes_mentioning(str(data_dir))}"
        time.sleep(0.1)
    assert not (data_dir / "postgres" / "pgdata" / "postmaster.pid").exists()


def _state(pid: int) -> str:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("State:"):
                return line
    except OSError:
        return "gone"
    return ""




@pytest.mark.parametrize("args", [
    ("serve", "--port", "70000"), ("serve", "--port", "0"), ("serve", "--workers", "0"),
    ("mcp", "--http", "--agent-id", "a", "--port", "99999"), ("restore", "x.ndjson", "--batch", "0"),
    ("restore", "x.ndjson", "--batch", "257"), ("import", ".", "--batch-files", "-3"),
    ("import", ".", "--batch-bytes", "0"), ("maintain", "--threshold", "0"), ("maintain", "--drop-ratio", "7"),
    ("mcp", "--agent-id", "a", "--max-context-tokens", "many")])
def test_numbers_out_of_range_are_refused_by_the_parser(args: tuple[str, ...]) -> None:
    """A port past 65535 used to listen on another port (mod 65536) while printing the one asked for."""
    result = run(clean_env(), *args, ok=False)
    assert result.returncode == 2 and "error: argument" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_what_a_user_gets_wrong_is_one_error_line(cli_db: str) -> None:
    """No traceback: a bad org name, a database that does not answer (whichever driver finds it out), a DSN
    that is not one, an unknown revision, a bad number in the environment."""
    unreachable = "postgresql://u:p@127.0.0.1:1/db"
    for env, args, said in (
            (clean_env(PGCONTEXT_DATABASE_URL=cli_db), ("orgs", "create", ""), "an org's name is 1-200 characters"),
            (clean_env(PGCONTEXT_DATABASE_URL=cli_db), ("orgs", "create", "x" * 201), "1-200 characters"),
            (clean_env(PGCONTEXT_DATABASE_URL=unreachable), ("orgs", "list"), "cannot connect"),
            # (these migrate first, through Alembic's own connection)
            (clean_env(PGCONTEXT_DATABASE_URL=unreachable), ("orgs", "create", "acme"), "cannot connect"),
            (clean_env(PGCONTEXT_DATABASE_URL=unreachable), ("keys", "create", "--org", "acme"), "cannot connect"),
            (clean_env(PGCONTEXT_DATABASE_URL=unreachable), ("maintain",), "cannot connect"),
            (clean_env(PGCONTEXT_DATABASE_URL="notadsn"), ("orgs", "list"), "invalid DSN"),
            (clean_env(PGCONTEXT_DATABASE_URL=cli_db), ("migrate", "--revision", "nonexistent"), "nonexistent"),
            (clean_env(PGCONTEXT_MCP_MAX_CONTEXT_TOKENS="abc"), ("mcp", "--key", "k", "--agent-id", "a"),
             "PGCONTEXT_MCP_MAX_CONTEXT_TOKENS: 'abc' is not a whole number"),
            # (it listened on the port mod 65536 while it printed the one asked for, as --port did)
            (clean_env(PGCONTEXT_PORT="99999"), ("serve",), "PGCONTEXT_PORT must be between 1 and 65535")):
        result = run(env, *args, ok=False)
        assert result.returncode == 2, (args, result.stdout, result.stderr)
        assert "Traceback" not in result.stderr and result.stderr.startswith("error: "), (args, result.stderr)
        assert said in result.stderr, (args, result.stderr)
