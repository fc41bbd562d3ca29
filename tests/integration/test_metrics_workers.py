"""``/metrics`` under ``pgcontext serve --workers 2`` (real processes): every scrape, whichever worker
answers it, shows the requests of both workers summed (prometheus-client's multiprocess mode)."""

from __future__ import annotations

import os
import shutil
import signal
import time
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry, generate_latest, multiprocess
from prometheus_client.parser import text_string_to_metric_families

from service.settings import Settings
from tests.integration.conftest import serving

pytestmark = pytest.mark.slow

def sample(exposition: str, name: str, path: str) -> float:
    """The value of sample ``name`` for GET ``path`` (0 when absent)."""
    for family in text_string_to_metric_families(exposition):
        for s in family.samples:
            if s.name == name and s.labels.get("path") == path and s.labels.get("method") == "GET":
                return float(s.value)
    return 0.0


def healthz_count(exposition: str) -> float:
    return sample(exposition, "litestar_requests_total", "/healthz")


def per_worker(metrics_dir: Path, scratch: Path) -> dict[str, float]:
    """Each worker's own /healthz count, read from its files alone."""
    counts: dict[str, float] = {}
    for counter_file in metrics_dir.glob("counter_*.db"):
        alone = scratch / counter_file.stem
        alone.mkdir(parents=True)
        shutil.copy2(counter_file, alone / counter_file.name)
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry, path=str(alone))  # type: ignore[no-untyped-call]
        counts[counter_file.stem.removeprefix("counter_")] = healthz_count(generate_latest(registry).decode())
    return counts


def settled(metrics_dir: Path, scratch: Path, sent: int, wait_s: float = 2.0) -> dict[str, float]:
    """:func:`per_worker` once the counts reach ``sent``, or as they stand after ``wait_s``: a worker
    counts a request when its response has gone out, so the last one may land a moment after the
    client has read it."""
    deadline = time.monotonic() + wait_s
    for attempt in range(1_000):
        split = per_worker(metrics_dir, scratch / str(attempt))
        if sum(split.values()) >= sent or time.monotonic() > deadline:
            return split
        time.sleep(0.02)
    return split


def test_metrics_sum_every_worker(tmp_path: Path, settings: Settings, app_dsn: str, redis_url: str) -> None:
    data_dir = tmp_path / "data"
    stale = data_dir / "metrics" / "999999999"  # a previous run's directory (no such pid): removed at start
    stale.mkdir(parents=True)
    with serving(data_dir, settings, app_dsn, redis_url, "--workers", "2") as live:
        assert not stale.exists()
        dirs = [d for d in (data_dir / "metrics").iterdir()]
        assert [d.name for d in dirs] == [str(live.proc.pid)], dirs
        metrics_dir = dirs[0]
        # New connections, so the kernel spreads them over both workers' accept queues.
        sent, split = 0, {}
        while sent < 400:
            for _ in range(40):
                assert httpx.get(f"{live.base}/healthz", headers={"Connection": "close"}).status_code == 200
            sent += 40
            split = settled(metrics_dir, tmp_path / f"scratch-{sent}", sent)
            if len([c for c in split.values() if c > 0]) == 2:
                break
        assert len([c for c in split.values() if c > 0]) == 2, f"one worker served every request: {split}"
        assert sum(split.values()) == sent, split
        # Every scrape, whichever worker answers it, reports the total.
        for _ in range(12):
            r = httpx.get(f"{live.base}/metrics", headers={"Connection": "close"})
            assert r.status_code == 200
            assert healthz_count(r.text) == sent, (split, r.text[:2000])
        # The in-progress gauge is merged over live workers (livesum): the scrape itself is the one.
        assert sample(r.text, "litestar_requests_in_progress", "/metrics") == 1.0, r.text[:3000]

        # A worker that stops (SIGTERM: uvicorn's supervisor then starts another) marks itself dead, so
        # its live gauge drops out, while the counts it made stay in the totals.
        livesum = {f.stem.rsplit("_", 1)[1] for f in metrics_dir.glob("gauge_livesum_*.db")}
        assert livesum == set(split), (livesum, split)
        stopped = min(split)
        os.kill(int(stopped), signal.SIGTERM)
        deadline = time.monotonic() + 60
        while (metrics_dir / f"gauge_livesum_{stopped}.db").exists():
            assert time.monotonic() < deadline, (sorted(p.name for p in metrics_dir.iterdir()), live.output.text())
            time.sleep(0.2)
        assert (metrics_dir / f"counter_{stopped}.db").exists()
        live.wait_ready()
        r = httpx.get(f"{live.base}/metrics", headers={"Connection": "close"})
        assert healthz_count(r.text) == sent, r.text[:2000]
        assert sample(r.text, "litestar_requests_in_progress", "/metrics") == 1.0, r.text[:3000]
    assert not metrics_dir.exists()  # removed when serve stops
