"""Storage faults under ``pgcontext serve`` with its embedded servers: the volume fills up, the volume
goes read-only. Writes answer 503 with ``Retry-After`` meanwhile (never 404, which a client takes for
an answer about its data and does not retry); a full disk is survived without a restart of ``serve``
once space is back; SIGTERM on a read-only volume still stops every process.

These tests mount file systems (a tmpfs of limited size; an ext4 image on a loop device whose errors
remount it read-only): they need root and ``mount``, and fail when they cannot have them."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import shutil
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import httpx
import pytest

from service.embedded.postgres import EmbeddedPostgres
from service.settings import Settings
from tests.integration.test_cli import copy_models
from tests.integration.test_lifecycle import Serve, assert_nothing_left, kill_all, migrated_pgdata

__all__ = ["migrated_pgdata"]  # the fixture, shared with the lifecycle tests

pytestmark = [pytest.mark.slow, pytest.mark.integration, pytest.mark.serial]

RECOVERY_S = 90
"""The longest a full disk may keep the service down once space is back."""


def require_mounts() -> None:
    assert os.geteuid() == 0, "storage fault tests mount file systems: run them as root"
    for tool in ("mount", "umount", "mkfs.ext4"):
        assert shutil.which(tool), f"storage fault tests need {tool}"


def sh(*args: str) -> None:
    subprocess.run(args, check=True, capture_output=True, timeout=60)


def unmount(path: Path) -> None:
    for _ in range(50):
        if subprocess.run(["umount", str(path)], capture_output=True).returncode == 0 or not path.is_mount():
            return
        time.sleep(0.2)
    subprocess.run(["umount", "-l", str(path)], capture_output=True)


def seeded(data: Path, settings: Settings, template: Path) -> None:
    """The models and a migrated cluster (copied: initdb and the migrations cost seconds)."""
    copy_models(settings.data_dir / "models", data / "models")
    shutil.copytree(template, data / "postgres" / "pgdata", symlinks=True)
    shutil.copy2(template.parent / "superuser.secret", data / "postgres")


def api_key(serve: Serve) -> str:
    return serve.output.text().split("Its API key (shown once):\n", 1)[1].split()[0]


class Writes:
    """Writes a memory every ``interval_s`` in a thread, counting statuses; every non-201 must be a 503
    with ``Retry-After`` (a refused connection counts as what it is)."""

    def __init__(self, base: str, key: str, interval_s: float = 0.2) -> None:
        self.base, self.headers, self.interval_s = base, {"Authorization": f"Bearer {key}"}, interval_s
        self.statuses: Counter[int | str] = Counter()
        self.wrong: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Writes:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(60)

    def _run(self) -> None:
        n = 0
        with httpx.Client(base_url=self.base, headers=self.headers, timeout=15) as http:
            while not self._stop.wait(self.interval_s):
                n += 1
                try:
                    r = http.post("/v1/memories", json={"text": f"A note written while the disk fills, {n}."})
                except httpx.TransportError as exc:
                    self.statuses[type(exc).__name__] += 1
                    continue
                self.statuses[r.status_code] += 1
                if r.status_code != 201 and not (r.status_code == 503 and r.headers.get("retry-after", "").isdigit()):
                    self.wrong.append(f"{r.status_code} {r.headers.get('retry-after')} {r.text[:300]}")

    def succeeded_since(self, count: int) -> bool:
        return self.statuses[201] > count


def fill(path: Path) -> Path:
    """Write zeros into ``path/filler`` until the file system is full."""
    filler = path / "filler"
    chunk = b"\0" * 2**20
    with filler.open("wb") as f:
        try:
            while True:
                f.write(chunk)
                f.flush()
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc
    return filler


async def force_wal_switches(dsn: str) -> list[str]:
    """WAL (a logical message: no table file grows, which a full disk would refuse first) and segment
    switches as the superuser until the server goes away: a new segment cannot be created, and a
    failed WAL write is a PANIC."""
    errors: list[str] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            conn = await asyncpg.connect(dsn, timeout=5)
        except (OSError, asyncpg.PostgresError, TimeoutError) as exc:
            errors.append(f"connect: {exc!r}"[:200])
            return errors  # the server is gone
        try:
            for _ in range(100):
                await conn.execute("SELECT pg_logical_emit_message(false, 'fill', repeat('x', 4000000))")
                await conn.execute("SELECT pg_switch_wal()")
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, TimeoutError) as exc:
            errors.append(repr(exc)[:200])
        finally:
            with contextlib.suppress(Exception):
                await conn.close(timeout=2)
        await asyncio.sleep(0.2)
    return errors


@pytest.fixture
def full_disk_data(tmp_path: Path, settings: Settings, migrated_pgdata: Path) -> Iterator[Path]:
    """A data dir whose ``postgres`` directory is a 300 MB tmpfs (mounted before the first start)."""
    require_mounts()
    data = tmp_path / "data"
    (data / "postgres").mkdir(parents=True)
    sh("mount", "-t", "tmpfs", "-o", "size=300m", "tmpfs", str(data / "postgres"))
    try:
        seeded(data, settings, migrated_pgdata)
        yield data
    finally:
        kill_all(data)
        unmount(data / "postgres")


def test_a_full_disk_is_survived_without_a_restart_of_serve(full_disk_data: Path) -> None:
    data = full_disk_data
    serve = Serve(data)
    try:
        serve.wait_ready()
        key = api_key(serve)
        dsn = EmbeddedPostgres(data / "postgres").start().dsn()  # attaches: serve owns the server
        with Writes(serve.base, key) as writes:
            deadline = time.monotonic() + 30
            while not writes.succeeded_since(2):
                assert time.monotonic() < deadline, writes.statuses
                time.sleep(0.1)
            filler = fill(data / "postgres")
            errors = asyncio.run(force_wal_switches(dsn))
            # Postgres PANICs, its crash recovery cannot write either, and it exits: /readyz says why.
            down = serve.wait_event("embedded_postgres_died", timeout_s=60)
            assert down.get("reason"), down
            deadline = time.monotonic() + 60
            while True:
                ready = httpx.get(f"{serve.base}/readyz", timeout=5)
                if "postgres_server" in ready.json()["checks"]:
                    break
                assert time.monotonic() < deadline, ready.text
                time.sleep(0.2)
            assert ready.status_code == 503 and ready.json()["checks"]["postgres_server"].startswith("down: "), \
                ready.text
            failed = serve.wait_event("embedded_postgres_restart_failed", timeout_s=60)  # still full: backs off
            assert failed["retry_in_s"], failed

            # Space comes back: the service recovers by itself.
            filler.unlink()
            sh("mount", "-o", "remount,size=800m", str(data / "postgres"))
            freed = time.monotonic()
            before = writes.statuses[201]
            while True:
                with contextlib.suppress(httpx.TransportError):
                    ready = httpx.get(f"{serve.base}/readyz", timeout=5)
                    if ready.status_code == 200 and writes.statuses[201] > before:
                        break
                assert time.monotonic() - freed < RECOVERY_S, (serve.output.text()[-3000:], writes.statuses)
                time.sleep(0.5)
            recovered_s = time.monotonic() - freed
        assert serve.proc.poll() is None
        assert "postgres_server" not in ready.json()["checks"]
        assert serve.wait_event("embedded_postgres_restarted")
        assert not writes.wrong, (writes.wrong[:5], writes.statuses)
        assert writes.statuses[503] > 0, writes.statuses  # the outage was felt, as 503s
        print(f"full disk: {down['reason']!r}; recovered {recovered_s:.1f} s after space came back; "
              f"writes {dict(writes.statuses)}; "
              f"forced-switch errors {errors[:3]}")
        assert serve.stop(signal.SIGTERM) == 0, serve.output.text()[-3000:]
        assert_nothing_left(data)
    finally:
        serve.kill()


@pytest.fixture
def read_only_data(tmp_path: Path, settings: Settings, migrated_pgdata: Path) -> Iterator[tuple[Path, Path]]:
    """A data dir on an ext4 image mounted ``errors=remount-ro``, and the file that turns it read-only
    (ext4's ``trigger_fs_error``: the kernel then remounts it read-only, as after an I/O error)."""
    require_mounts()
    image, data = tmp_path / "volume.img", tmp_path / "data"
    with image.open("wb") as f:
        f.truncate(512 * 2**20)
    sh("mkfs.ext4", "-q", "-F", str(image))
    data.mkdir()
    sh("mount", "-o", "loop,errors=remount-ro", str(image), str(data))
    try:
        device = subprocess.run(["findmnt", "-no", "SOURCE", str(data)], capture_output=True, text=True,
                                check=True).stdout.strip()
        trigger = Path("/sys/fs/ext4") / Path(device).name / "trigger_fs_error"
        assert trigger.exists(), f"{trigger} is missing: the kernel cannot make the volume read-only on demand"
        seeded(data, settings, migrated_pgdata)
        yield data, trigger
    finally:
        kill_all(data)
        unmount(data)


def test_a_read_only_volume_answers_503_and_sigterm_leaves_no_process(read_only_data: tuple[Path, Path]) -> None:
    data, trigger = read_only_data
    serve = Serve(data)
    try:
        serve.wait_ready()
        key = api_key(serve)
        headers = {"Authorization": f"Bearer {key}"}
        with httpx.Client(base_url=serve.base, headers=headers, timeout=15) as http:
            assert http.post("/v1/memories", json={"text": "Written before the volume failed."}).status_code == 201
            trigger.write_text("1")
            with pytest.raises(OSError) as caught:
                (data / "probe").write_text("x")
            assert caught.value.errno == errno.EROFS
            statuses: Counter[int | str] = Counter()
            wrong = []
            for n in range(20):
                try:
                    r = http.post("/v1/memories", json={"text": f"Written on a read-only volume, {n}."})
                except httpx.TransportError as exc:
                    statuses[type(exc).__name__] += 1
                    continue
                statuses[r.status_code] += 1
                if not (r.status_code == 503 and r.headers.get("retry-after", "").isdigit()):
                    wrong.append(f"{r.status_code} {r.text[:300]}")
                time.sleep(0.1)
        assert not wrong and statuses[503] == 20, (wrong[:5], statuses)
        assert serve.stop(signal.SIGTERM, timeout_s=120) == 0, serve.output.text()[-3000:]
        assert_nothing_left(data, timeout_s=30)
        shutdown = serve.output.text().split("Shutting down", 1)[-1]
        assert "Traceback" not in shutdown and "serve_stopped" in shutdown, shutdown[-3000:]
    finally:
        serve.kill()
