"""Process lifecycle with real processes: `pgcontext serve` and a test run stop what they started
(SIGTERM, SIGINT), a `kill -9` leaves servers the next start adopts, and an embedded server that
dies while serving is started again. Every test ends by scanning /proc for anything left running
under its data dir (command line or working directory)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import httpx
import pytest

from service.db import migrate
from service.embedded.ownership import ProcessId, read_pid_file
from service.embedded.postgres import EmbeddedPostgres, free_port
from service.embedded.redis_server import EmbeddedRedis
from service.settings import Settings
from tests.integration.test_cli import PGCONTEXT, ROOT, Output, children_of, clean_env, copy_models

pytestmark = pytest.mark.slow


def leftovers(root: Path) -> dict[int, str]:
    """Live processes whose command line or working directory lies under ``root`` (not this one)."""
    needle = str(root)
    found: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        process = ProcessId.of(int(entry.name))
        if process is None:  # gone, or a zombie waiting to be reaped
            continue
        try:
            cwd = os.readlink(entry / "cwd")
        except OSError:
            cwd = ""
        cmdline = process.cmdline()
        if needle in cmdline or cwd.startswith(needle):
            found[process.pid] = cmdline or f"cwd={cwd}"
    return found


def assert_nothing_left(root: Path, timeout_s: float = 10) -> None:
    deadline = time.monotonic() + timeout_s
    while (left := leftovers(root)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not left, f"left running under {root}: {left}"


def kill_all(root: Path) -> None:
    """Last-resort clean-up for a failed test: nothing this test started outlives it."""
    for pid in leftovers(root):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


class Serve:
    """``pgcontext serve`` on a free port with its own data dir, output collected."""

    def __init__(self, data_dir: Path, *args: str, port: int | None = None) -> None:
        self.data_dir = data_dir
        self.port = port or free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        env = clean_env(PGCONTEXT_DATA_DIR=str(data_dir), PGCONTEXT_PORT=str(self.port),
                        PGCONTEXT_LOG_LEVEL="info")
        self.proc = subprocess.Popen([*PGCONTEXT, "serve", *args], env=env, cwd=ROOT, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)
        self.output = Output(self.proc)

    def wait_ready(self, timeout_s: float = 120) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            assert self.proc.poll() is None, f"serve exited early:\n{self.output.text()}"
            assert time.monotonic() < deadline, f"serve was not ready in time:\n{self.output.text()}"
            try:
                if httpx.get(f"{self.base}/readyz", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.2)

    def events(self) -> list[dict[str, object]]:
        found = []
        for line in list(self.output.lines):
            if line.startswith("{"):
                try:
                    found.append(json.loads(line))
                except ValueError:
                    continue
        return found

    def wait_event(self, name: str, timeout_s: float = 30) -> dict[str, object]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for event in self.events():
                if event.get("event") == name:
                    return event
            time.sleep(0.1)
        raise AssertionError(f"no {name} event in time:\n{self.output.text()}")

    def stop(self, sig: signal.Signals, timeout_s: float = 60) -> int:
        self.proc.send_signal(sig)
        return self.proc.wait(timeout_s)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


@pytest.fixture(scope="module")
def migrated_pgdata(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cluster initialised and migrated once: each test starts from a copy instead of paying initdb
    and the migrations (seconds on a busy machine) again. The first start on an empty data dir is
    what test_cli's end-to-end test runs."""
    pg = EmbeddedPostgres(tmp_path_factory.mktemp("template") / "postgres")
    try:
        pg.start()
        migrate.upgrade(pg.dsn())
    finally:
        pg.stop()
    return pg.pgdata


@pytest.fixture
def data_dir(tmp_path: Path, settings: Settings, migrated_pgdata: Path) -> Iterator[Path]:
    data = tmp_path / "data"
    copy_models(settings.data_dir / "models", data / "models")
    shutil.copytree(migrated_pgdata, data / "postgres" / "pgdata", symlinks=True)
    shutil.copy2(migrated_pgdata.parent / "superuser.secret", data / "postgres")  # the cluster's password
    try:
        yield data
    finally:
        kill_all(data)


def postmaster(data_dir: Path) -> ProcessId:
    pid = int((data_dir / "postgres" / "pgdata" / "postmaster.pid").read_text().split()[0])
    process = ProcessId.of(pid)
    assert process is not None, f"no postmaster {pid}"
    return process


def redis_server(data_dir: Path) -> ProcessId:
    process = read_pid_file(data_dir / "redis" / "redis.pid")
    assert process is not None and process.alive(), process
    return process


def assert_stopped_cleanly(serve: Serve, sig: signal.Signals) -> None:
    assert serve.stop(sig) == 0, serve.output.text()
    assert_nothing_left(serve.data_dir)
    assert not (serve.data_dir / "postgres" / "pgdata" / "postmaster.pid").exists()
    assert not (serve.data_dir / "postgres" / "owner.pid").exists()
    assert not (serve.data_dir / "redis" / "owner.pid").exists()


# SIGTERM with one worker ends test_dead_embedded_server_restarted_and_sigterm_stops_all, SIGINT
# ends test_kill_9_then_the_next_start_adopts_and_sigint_stops_all: every start of `serve` costs
# seconds, so the tests share them.


@pytest.mark.parametrize(("to_every_process", "workers"), [(False, "2"), (True, "1")],
                         ids=["to-serve-with-2-workers", "to-every-process"])
def test_sigterm_stops_the_embedded_servers(data_dir: Path, to_every_process: bool, workers: str) -> None:
    """To `serve` alone (Docker, Kubernetes), or to every process at once as systemd stops a unit
    (KillMode=control-group): the embedded servers then exit on their own and are not restarted."""
    serve = Serve(data_dir, "--workers", workers)
    try:
        serve.wait_ready()
        assert postmaster(data_dir).alive() and redis_server(data_dir).alive()
        if to_every_process:
            for pid in {*children_of(serve.proc.pid), *leftovers(data_dir)}:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)
        assert_stopped_cleanly(serve, signal.SIGTERM)
        assert not [e for e in serve.events() if str(e.get("event", "")).endswith(("_died", "_restarted"))]
    finally:
        serve.kill()


def test_kill_9_then_the_next_start_adopts_and_sigint_stops_all(data_dir: Path) -> None:
    first = Serve(data_dir, "--workers", "2")
    second: Serve | None = None
    try:
        first.wait_ready()
        pg, redis = postmaster(data_dir), redis_server(data_dir)
        workers = [p for p in map(ProcessId.of, children_of(first.proc.pid)) if p is not None and p != redis]
        assert len(workers) >= 2, workers
        first.kill()  # SIGKILL: no clean-up ran, both servers are orphaned
        assert pg.alive() and redis.alive()
        deadline = time.monotonic() + 30  # the workers end with their parent (and free the port)
        while any(w.alive() for w in workers):
            assert time.monotonic() < deadline, [w for w in workers if w.alive()]
            time.sleep(0.1)

        second = Serve(data_dir, port=first.port)
        second.wait_ready()
        assert second.wait_event("embedded_postgres_adopted")["pid"] == pg.pid
        assert postmaster(data_dir) == pg  # the same server, not a second one
        assert second.wait_event("embedded_redis_orphan_stopped")["pid"] == redis.pid
        assert not redis.alive()
        servers = [c for c in leftovers(data_dir).values() if "redis-server" in c]
        assert len(servers) == 1, servers

        # The adopter is the live owner now: a CLI command beside it attaches and leaves the servers running.
        beside = EmbeddedPostgres(data_dir / "postgres").start()
        assert not beside.owned
        beside.stop()
        assert pg.alive() and redis_server(data_dir).alive()
        assert httpx.get(f"{second.base}/readyz", timeout=5).status_code == 200

        assert_stopped_cleanly(second, signal.SIGINT)
        assert second.wait_event("serve_stopped")["signal"] == "SIGINT"
    finally:
        first.kill()
        if second is not None:
            second.kill()


def test_dead_embedded_server_restarted_and_sigterm_stops_all(data_dir: Path) -> None:
    serve = Serve(data_dir)
    try:
        serve.wait_ready()
        key = serve.output.text().split("Its API key (shown once):\n", 1)[1].split()[0]
        headers = {"Authorization": f"Bearer {key}"}
        r = httpx.post(f"{serve.base}/v1/memories", json={"text": "Written before the crash."}, headers=headers,
                       timeout=30)
        assert r.status_code == 201, r.text
        memory = f"{serve.base}/v1/memories/{r.json()['ids'][0]}"

        old = postmaster(data_dir)
        os.kill(old.pid, signal.SIGKILL)
        serve.wait_event("embedded_postgres_restarted")
        assert postmaster(data_dir) != old
        r = httpx.get(memory, headers=headers, timeout=10)  # the pool's connections to the dead server are gone
        assert r.status_code == 200 and r.json()["text"] == "Written before the crash.", r.text

        old_redis = redis_server(data_dir)
        os.kill(old_redis.pid, signal.SIGKILL)
        serve.wait_event("embedded_redis_restarted")
        assert redis_server(data_dir) != old_redis
        ready = httpx.get(f"{serve.base}/readyz", timeout=5)
        assert ready.status_code == 200 and ready.json()["checks"]["redis"] == "ok", ready.text
        put = httpx.put(f"{serve.base}/v1/agents/a1/directive/", json={"content": "Be brief."}, headers=headers,
                        timeout=10)
        assert put.status_code in (200, 201), put.text
        got = httpx.get(f"{serve.base}/v1/agents/a1/directive/", headers=headers, timeout=10)
        assert got.status_code == 200 and got.json()["content"] == "Be brief.", got.text

        assert_stopped_cleanly(serve, signal.SIGTERM)
        assert serve.wait_event("serve_stopped")["signal"] == "SIGTERM"
    finally:
        serve.kill()


_HOLDER = """
import sys, time
from pathlib import Path
from service.db import migrate
from service.embedded.postgres import EmbeddedPostgres
from service.embedded.redis_server import EmbeddedRedis
from service.logs import configure
configure("warning")  # stdout carries only the line below
data = Path(sys.argv[1])
EmbeddedPostgres(data / "postgres").start()
EmbeddedRedis(data / "redis").start()
print("up", flush=True)
time.sleep(300)
"""


def answers(dsn: str) -> bool:
    async def select_1() -> bool:
        conn = await asyncpg.connect(dsn)
        try:
            return bool(await conn.fetchval("SELECT 1"))
        finally:
            await conn.close()

    return asyncio.run(select_1())


def test_another_process_attaches_while_the_owner_lives_and_adopts_once_it_is_killed(data_dir: Path) -> None:
    """The ownership rules on their own, without `serve`: the holder stands for `serve`, this test
    process for a CLI command beside it and then for the next start."""
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, str(data_dir)], cwd=ROOT, stdout=subprocess.PIPE,
                              env=clean_env(), text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "up"
        pg, redis = postmaster(data_dir), redis_server(data_dir)

        beside_pg = EmbeddedPostgres(data_dir / "postgres").start()
        beside_redis = EmbeddedRedis(data_dir / "redis").start()
        assert not beside_pg.owned and not beside_redis.owned
        assert answers(beside_pg.dsn()) and redis_server(data_dir) == redis
        beside_redis.stop()
        beside_pg.stop()  # not theirs to stop: the owner lives
        assert pg.alive() and redis.alive()

        holder.kill()
        holder.wait(10)
        next_pg = EmbeddedPostgres(data_dir / "postgres").start()
        next_redis = EmbeddedRedis(data_dir / "redis").start()
        try:
            assert next_pg.owned and postmaster(data_dir) == pg and answers(next_pg.dsn())
            assert next_redis.owned and not redis.alive() and redis_server(data_dir) != redis
        finally:
            next_redis.stop()
            next_pg.stop()
    finally:
        holder.kill()
        holder.wait(10)
    assert_nothing_left(data_dir)


_HOLDING_TEST = """
import os
import time
from pathlib import Path

import pytest

@pytest.mark.parametrize("which", [1, 2])
def test_holds_the_servers(pg_server: str, redis_url: str, which: int) -> None:
    Path({markers!r}, f"{{os.getpid()}}-{{which}}").write_text(pg_server + "\\n" + redis_url)
    time.sleep(300)
"""


@pytest.mark.parametrize("workers", [0, 2], ids=["one-process", "two-workers"])
def test_sigterm_to_a_test_run_stops_its_servers(tmp_path: Path, workers: int) -> None:
    """A run's servers stop on SIGTERM to pytest, also when the run is spread over worker processes
    (``make test`` runs most in two): each worker, holding servers of its own, is stopped as pytest is.
    The run starts as a shell's background job does, with SIGINT ignored, so no worker is stopped by
    an interrupt of its own."""
    markers = tmp_path / "servers-up"
    markers.mkdir()
    test_file = tmp_path / "test_holding.py"
    test_file.write_text(_HOLDING_TEST.format(markers=str(markers)))
    basetemp = tmp_path / "run"
    env = {k: v for k, v in clean_env().items() if k not in ("DATABASE_URL", "REDIS_URL")}
    spread = ["-n", str(workers)] if workers else ["-p", "no:xdist"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.conftest", *spread,
         "-c", str(ROOT / "pyproject.toml"), "--rootdir", str(ROOT), f"--basetemp={basetemp}", str(test_file)],
        env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    output = Output(proc)
    try:
        deadline = time.monotonic() + 90
        while len(list(markers.iterdir())) < max(1, workers):
            assert proc.poll() is None, output.text()
            assert time.monotonic() < deadline, output.text()
            time.sleep(0.1)
        running = leftovers(basetemp)
        servers = max(1, workers)
        assert sum("postgres -D" in c for c in running.values()) == servers, running
        assert sum("redis-server" in c for c in running.values()) == servers, running
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        still = leftovers(basetemp)
        kill_all(basetemp)
    assert not still, f"{still}\n{output.text()}"
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, output.text()
