"""``pgcontext export``, ``restore`` and ``import`` against live services (``pgcontext serve`` processes), the
commands run as subprocesses: a restore sends no line the service only counts ``skipped``, waits out 429s as
their ``Retry-After`` asks (and gives up after a bounded wait), shows its progress and what it did before a
failure; Ctrl-C ends a restore or an import with what was done and exit status 130 (and a second run resumes);
a batch whose answer was lost with the connection is sent again; errors say what is wrong (a service that does
not answer, an ``--out`` that cannot be written, the reason the service gives)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import subprocess
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from service.cli.transfer import TransferFailed, restore_from
from service.embedded.postgres import free_port
from service.settings import Settings
from tests.conftest import Tenant
from tests.integration.conftest import LiveService, serving
from tests.integration.test_cli import PGCONTEXT, ROOT, clean_env

SLOW_BUCKET = {"PGCONTEXT_RATE_LIMIT_RPS": "2", "PGCONTEXT_RATE_LIMIT_BURST": "40"}
"""An org's bucket refills 2 tokens a second: a restore's small requests (4-5 tokens) wait for them."""

IMPORT = [*PGCONTEXT, "import"]


@pytest.fixture(scope="module")
def slow_service(tmp_path_factory: pytest.TempPathFactory, settings: Settings, app_dsn: str,
                 redis_url: str) -> Iterator[LiveService]:
    """``pgcontext serve`` with a slowly refilled rate-limit bucket (the session's database and Redis)."""
    with serving(tmp_path_factory.mktemp("slow"), settings, app_dsn, redis_url, env=SLOW_BUCKET) as live:
        yield live


def cli(live: LiveService, tenant: Tenant, *args: str, command: list[str] | None = None,
        ok: bool = True) -> subprocess.CompletedProcess[str]:
    env = clean_env(PGCONTEXT_URL=live.base, PGCONTEXT_API_KEY=tenant.key)
    result = subprocess.run([*(command or PGCONTEXT), *args], env=env, cwd=ROOT, capture_output=True, text=True,
                            timeout=300)
    assert "Traceback" not in result.stderr, result.stderr
    if ok:
        assert result.returncode == 0, f"{args}: {result.stdout}\n{result.stderr}"
    return result


def summary(stdout: str) -> dict[str, dict[str, int]]:
    """``imported: 1 directive, 3 memory`` lines as {"imported": {"directive": 1, "memory": 3}}."""
    out: dict[str, dict[str, int]] = {}
    for line in stdout.splitlines():
        name, _, counts = line.partition(": ")
        out[name] = {kind: int(n) for n, kind in (part.split(" ") for part in counts.split(", ") if part)}
    return out


def export_file(path: Path, memories: int, *extra: dict[str, Any]) -> Path:
    lines = [{"type": "export", "format": 1},
             *({"type": "memory", "id": str(uuid.uuid4()), "text": f"Fact number {i}: the sky is blue on day {i}."}
               for i in range(memories)), *extra, {"type": "end", "counts": {"memory": memories}}]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


async def seeded(live: LiveService, make_tenant: Callable[[str], Awaitable[Tenant]]) -> Tenant:
    """An org with 6 memories and 2 imported documents (many chunks), written through ``live``."""
    tenant = await make_tenant("docs")
    async with httpx.AsyncClient(base_url=live.base, headers=tenant.headers, timeout=60) as http:
        r = await http.post("/v1/memories", json={"memories": [{"text": f"Memory {i} about the garden."}
                                                               for i in range(6)]})
        assert r.status_code == 201, r.text
        files = [{"path": f"notes/{n}.md", "content": "\n\n".join(f"## Part {i}\n" + "Words of prose. " * 40
                                                                   for i in range(30))} for n in ("a", "b")]
        r = await http.post("/v1/documents", json={"collection": "notes", "files": files})
        assert r.status_code == 200, r.text
    return tenant


async def listed(live: LiveService, tenant: Tenant) -> list[tuple[Any, ...]]:
    """The org's documents: path, content hash, language and chunk count."""
    async with httpx.AsyncClient(base_url=live.base, headers=tenant.headers, timeout=60) as http:
        for _ in range(10):  # a restore into a rate-limited service may leave the org's bucket empty
            r = await http.get("/v1/documents", params={"collection": "notes"})
            if r.status_code != 429:
                break
            await asyncio.sleep(float(r.headers.get("Retry-After", "1")))
    assert r.status_code == 200, r.text
    return [(d["path"], d["content_hash"], d["language"], d["chunks"]) for d in r.json()["items"]]


async def drain(live: LiveService, tenant: Tenant) -> None:
    """Take the whole bucket of ``tenant``'s org (a body of 40 x 16 KiB costs the 40-token burst)."""
    pad = {"type": "document", "pad": "x" * (40 * 16384)}
    async with httpx.AsyncClient(base_url=live.base, headers=tenant.headers, timeout=60) as http:
        r = await http.post("/v1/import", json={"lines": [pad]})
    assert r.status_code == 200, r.text


async def test_restore_sends_no_skipped_lines_and_waits_out_429(
        live_service: LiveService, slow_service: LiveService, tmp_path: Path,
        make_tenant: Callable[[str], Awaitable[Tenant]]) -> None:
    source = await seeded(live_service, make_tenant)
    saved = tmp_path / "org.ndjson"
    cli(live_service, source, "export", "--out", str(saved))
    counts = json.loads(saved.read_text().splitlines()[-1])["counts"]
    assert counts["document"] == 2 and counts["chunk"] > 10 and counts["memory"] == 6

    sent: list[str] = []
    statuses: list[int] = []

    async def on_request(request: httpx.Request) -> None:
        sent.extend(line["type"] for line in json.loads(request.content)["lines"])

    async def on_response(response: httpx.Response) -> None:
        statuses.append(response.status_code)

    fresh = await make_tenant("restored")
    await drain(slow_service, fresh)
    async with httpx.AsyncClient(base_url=slow_service.base, timeout=60,
                                 event_hooks={"request": [on_request], "response": [on_response]}) as http:
        totals = await restore_from(saved, url=slow_service.base, key=fresh.key, batch_memories=3, http=http)
    assert "document" in sent and "chunk" not in sent  # a document's chunks are cut again from its content
    assert 429 in statuses and statuses[-1] == 200  # waited as Retry-After asked, then sent the batch again
    assert totals.imported["memory"] == 6 and totals.imported["document"] == 2
    assert dict(totals.skipped) == {"document": 0, "chunk": counts["chunk"]}
    assert await listed(slow_service, fresh) == await listed(live_service, source)

    again = summary(cli(slow_service, fresh, "restore", str(saved)).stdout)  # a second run writes nothing twice
    assert again["imported"]["memory"] == again["imported"]["document"] == 0
    assert again["existing"]["memory"] == 6 and again["existing"]["document"] == 2
    assert again["skipped"] == {"chunk": counts["chunk"], "document": 0}

    other = await make_tenant("impatient")
    await drain(slow_service, other)
    with pytest.raises(TransferFailed, match=r"still answered 429 rate_limited.*run restore again later"):
        await restore_from(saved, url=slow_service.base, key=other.key, max_wait_s=1)


async def test_restore_shows_progress_and_what_it_did_before_an_error(
        live_service: LiveService, tmp_path: Path, make_tenant: Callable[[str], Awaitable[Tenant]]) -> None:
    bad = {"type": "memory", "id": "not-a-uuid", "text": "A memory whose id is not one."}
    saved = export_file(tmp_path / "bad.ndjson", 12, bad)
    result = cli(live_service, await make_tenant("partial"), "restore", str(saved), "--batch", "5", ok=False)
    assert result.returncode == 1
    assert summary(result.stdout)["imported"] == {"conversation": 0, "directive": 0, "document": 0, "event": 0,
                                                  "memory": 10, "settings": 0}
    assert "restoring" in result.stderr and "10/13 lines" in result.stderr  # the progress bar, as it stopped
    assert f"error: POST /v1/import answered 422 invalid_line: line 14 of {saved} is not" in result.stderr


async def test_a_refused_line_is_named_by_its_line_in_the_file(
        live_service: LiveService, tmp_path: Path, make_tenant: Callable[[str], Awaitable[Tenant]]) -> None:
    """The service names a line of its batch (``lines[1]``): restore says which line of the file that is (lines
    not sent counted), with the service's reason."""
    said = {"type": "memory", "text": "Dana lives in Paris.", "occurred_at": "2024-05-01T00:00:00Z"}
    bad = {**said, "id": str(uuid.uuid4()), "valid_until": "2024-01-01T00:00:00Z"}
    saved = export_file(tmp_path / "dana.ndjson", 2, {"type": "chunk"}, {**said, "id": str(uuid.uuid4())}, bad)
    with pytest.raises(TransferFailed) as refused:
        await restore_from(saved, url=live_service.base, key=(await make_tenant("dana")).key, batch_memories=2)
    assert f"422 validation_error: line 6 of {saved}: valid_until must be after occurred_at" in str(refused.value)
    assert str(refused.value).endswith(": field valid_until") and "lines[" not in str(refused.value)


async def test_ctrl_c_stops_a_restore_with_its_totals_and_a_rerun_resumes(
        live_service: LiveService, tmp_path: Path, make_tenant: Callable[[str], Awaitable[Tenant]]) -> None:
    saved = export_file(tmp_path / "big.ndjson", 1500)
    fresh = await make_tenant("interrupted")
    with httpx.Client(base_url=live_service.base, headers=fresh.headers) as http:
        stdout, stderr = interrupted([*PGCONTEXT, "restore", str(saved), "--batch", "50"], live_service, fresh,
                                     lambda: bool(http.get("/v1/memories", params={"limit": 1}).json()["items"]))
    assert "restore interrupted after" in stderr and "of 1,500 lines; run it again to resume" in stderr
    done = summary(stdout)["imported"]["memory"]
    assert 0 < done < 1500

    rerun = summary(cli(live_service, fresh, "restore", str(saved)).stdout)
    assert rerun["existing"]["memory"] >= done  # a batch in flight at Ctrl-C may have been written too
    assert rerun["existing"]["memory"] + rerun["imported"]["memory"] == 1500


def interrupted(command: list[str], live: LiveService, tenant: Tenant,
                started: Callable[[], bool]) -> tuple[str, str]:
    """Run ``command``, send it SIGINT once ``started()`` holds; its stdout and stderr (it exited 130)."""
    env = clean_env(PGCONTEXT_URL=live.base, PGCONTEXT_API_KEY=tenant.key)
    # A user's Ctrl-C: SIGINT at its default action in the command, even when this run inherited it ignored
    # (a shell starts background jobs with SIGINT ignored, and a child keeps that: Python then installs no
    # KeyboardInterrupt and the command runs to its end).
    proc = subprocess.Popen(command, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 60
        while not started():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the command did not get going in time"
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
    assert proc.returncode == 130, (stdout, stderr)
    assert "Traceback" not in stderr and "CancelledError" not in stderr, stderr
    return stdout, stderr


async def test_ctrl_c_stops_an_import_with_the_files_sent_and_a_rerun_resumes(
        live_service: LiveService, tmp_path: Path, make_tenant: Callable[[str], Awaitable[Tenant]]) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    for n in range(200):
        (tree / f"note-{n:03}.md").write_text(f"# Note {n}\n\n" + f"Line {n} of a note about the garden.\n" * 30)
    tenant = await make_tenant("import")
    args = [str(tree), "--collection", "notes", "--batch-files", "2"]
    with httpx.Client(base_url=live_service.base, headers=tenant.headers) as http:
        _, stderr = interrupted([*IMPORT, *args], live_service, tenant, lambda: len(
            http.get("/v1/documents", params={"collection": "notes"}).json()["items"]) >= 4)
    said = [line for line in stderr.splitlines() if line.startswith("import interrupted: ")]
    assert said and "files sent" in said[0] and "run it again to resume" in said[0], stderr
    # 4 listed: the first batch was answered before the second was sent (whose answer the interrupt may
    # have cut off), so at least its 2 files are counted
    assert int(said[0].split()[2].replace(",", "")) >= 2

    cli(live_service, tenant, *args, command=IMPORT)
    with httpx.Client(base_url=live_service.base, headers=tenant.headers) as http:
        listed = http.get("/v1/documents", params={"collection": "notes", "limit": 1000}).json()
    assert len(listed["items"]) == 200


def test_export_says_what_is_wrong_before_it_connects(live_service: LiveService, live_tenant: Tenant,
                                                       tmp_path: Path) -> None:
    nobody = f"http://127.0.0.1:{free_port()}"
    down = cli(live_service, live_tenant, "export", "--url", nobody, "--out", str(tmp_path / "x.ndjson"), ok=False)
    assert down.returncode == 1 and f"could not connect to {nobody}" in down.stderr and "broke off" not in down.stderr
    for out, said in ((tmp_path / "nope" / "x.ndjson", f"the directory {tmp_path / 'nope'} does not exist"),
                      (tmp_path, f"--out {tmp_path} is a directory")):
        result = cli(live_service, live_tenant, "export", "--out", str(out), ok=False)
        assert result.returncode == 2 and said in result.stderr and ".tmp" not in result.stderr, result.stderr
    assert not list(tmp_path.iterdir())


def test_import_error_says_the_services_reason(live_service: LiveService, live_tenant: Tenant,
                                               tmp_path: Path) -> None:
    result = cli(live_service, live_tenant, str(tmp_path), "--collection", "", command=IMPORT, ok=False)
    assert result.returncode == 2
    assert "400 validation_error" in result.stderr and "collection: Expected `str` of length >= 1" in result.stderr


async def test_import_waits_out_429_instead_of_failing_files(
        slow_service: LiveService, tmp_path: Path, make_tenant: Callable[[str], Awaitable[Tenant]]) -> None:
    """An org whose request budget is spent: each batch waits as Retry-After says and is then accepted (a 429
    was a 4xx like any other: the batch was split and its files reported as failed)."""
    tree = tmp_path / "tree"
    tree.mkdir()
    for n in range(6):
        (tree / f"note-{n}.md").write_text(f"# Note {n}\n\nA note about the garden, number {n}.\n")
    tenant = await make_tenant("patient-import")
    await drain(slow_service, tenant)
    result = cli(slow_service, tenant, str(tree), "--collection", "notes", "--batch-files", "2", "--quiet",
                 command=IMPORT)
    assert "rate_limited" not in result.stdout + result.stderr, (result.stdout, result.stderr)
    async with httpx.AsyncClient(base_url=slow_service.base, headers=tenant.headers) as http:
        for _ in range(30):  # the import may have spent the bucket again: come back as Retry-After says
            r = await http.get("/v1/documents", params={"collection": "notes"})
            if r.status_code != 429:
                break
            await asyncio.sleep(float(r.headers["retry-after"]))
    assert r.status_code == 200 and len(r.json()["items"]) == 6, r.text


class LosesAnswers(httpx.AsyncBaseTransport):
    """A real connection to the service whose first ``losses`` answers are lost after the service wrote
    them (the connection drops on the way back)."""

    def __init__(self, losses: int) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.losses = losses
        self.requests = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.requests += 1
        response = await self.inner.handle_async_request(request)
        if self.losses:
            self.losses -= 1
            await response.aread()
            await response.aclose()
            raise httpx.RemoteProtocolError("Server disconnected without sending a response.", request=request)
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


async def test_restore_sends_a_batch_again_when_its_answer_is_lost(
        live_service: LiveService, tmp_path: Path, make_tenant: Callable[[str], Awaitable[Tenant]]) -> None:
    saved = export_file(tmp_path / "org.ndjson", 4)
    fresh = await make_tenant("lost-answers")
    flaky = LosesAnswers(losses=2)
    async with httpx.AsyncClient(base_url=live_service.base, transport=flaky, timeout=60) as http:
        totals = await restore_from(saved, url=live_service.base, key=fresh.key, batch_memories=2, http=http)
    assert flaky.requests == 4  # the first batch sent three times, the second once
    assert totals.requests == 2 and totals.imported["memory"] == 2 and totals.existing["memory"] == 2

    other = await make_tenant("lost-for-good")
    async with httpx.AsyncClient(base_url=live_service.base, transport=LosesAnswers(losses=10), timeout=60) as http:
        with pytest.raises(TransferFailed, match=r"failed 3 times \(RemoteProtocolError: Server disconnected"):
            await restore_from(saved, url=live_service.base, key=other.key, http=http)
