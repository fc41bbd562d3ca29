"""Files the service writes and needs again (the embedded superuser's secret, owner and server pid files,
``pg_hba.conf``, the tokenizer and model caches) are written whole or not at all and survive a crash of
the file system: a temporary file in the same directory, fsynced, renamed over the target, then the
directory fsynced. A superuser secret left empty by a crash after the first start locked ``serve`` out
of its own cluster for good."""

from __future__ import annotations

import ast
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from service.embedded import ownership
from service.embedded.postgres import EmbeddedPostgres
from service.embeddings import onnx_model
from service.text.tokens import seed_bpe_file

SERVICE = Path(__file__).resolve().parents[2] / "service"


@pytest.fixture
def synced(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """What ``os.fsync`` was called on (the path behind each descriptor), in order."""
    paths: list[str] = []
    real = os.fsync

    def record(fd: int) -> None:
        paths.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fsync", record)
    yield paths


def assert_durable(target: Path, synced: list[str]) -> None:
    """The file's content reached the disk before its name did, and then the name did."""
    directory = str(target.parent)
    files = [i for i, p in enumerate(synced) if Path(p).parent == target.parent and target.name in Path(p).name]
    assert files, f"{target.name} was never fsynced: {synced}"
    assert directory in synced[files[0]:], f"{directory} not fsynced after {target.name}: {synced}"
    leftovers = [p.name for p in target.parent.iterdir() if p.name != target.name and target.name in p.name]
    assert not leftovers, f"temporary files left beside {target.name}: {leftovers}"


def test_the_superuser_secret(tmp_path: Path, synced: list[str]) -> None:
    pg = EmbeddedPostgres(tmp_path / "postgres")
    pg.data_dir.mkdir()
    password = pg._new_secret()
    assert pg.secret_file.read_text() == password and len(password) > 30
    assert pg.secret_file.stat().st_mode & 0o777 == 0o600
    assert_durable(pg.secret_file, synced)


def test_owner_and_server_pid_files(tmp_path: Path, synced: list[str]) -> None:
    ownership.claim(tmp_path)
    assert ownership.live_owner(tmp_path) == ownership.ProcessId.current()
    assert_durable(tmp_path / "owner.pid", synced)
    synced.clear()
    ownership.write_pid_file(tmp_path / "redis.pid", ownership.ProcessId.current())
    assert ownership.read_pid_file(tmp_path / "redis.pid") == ownership.ProcessId.current()
    assert_durable(tmp_path / "redis.pid", synced)


HBA = """# comment: trust
local   all             all                                     trust
host    all             all             127.0.0.1/32            trust
host    replication     all             ::1/128                 scram-sha-256
"""


def test_pg_hba_conf_switched_to_scram(tmp_path: Path, synced: list[str]) -> None:
    hba = tmp_path / "pg_hba.conf"
    hba.write_text(HBA)
    hba.chmod(0o640)
    os.chown(hba, 65534, 65534)  # as root, the server's system user owns it: it must still read it
    synced.clear()
    from service.embedded.postgres import require_scram_rules

    assert require_scram_rules(hba) is True
    rules = [line.split() for line in hba.read_text().splitlines() if line and not line.startswith("#")]
    assert [r[-1] for r in rules] == ["scram-sha-256"] * 3
    assert hba.read_text().startswith("# comment: trust\n")
    assert (hba.stat().st_uid, hba.stat().st_gid, hba.stat().st_mode & 0o777) == (65534, 65534, 0o640)
    assert_durable(hba, synced)
    synced.clear()
    assert require_scram_rules(hba) is False and synced == []  # nothing to change, nothing written


def test_the_tokenizer_cache(tmp_path: Path, synced: list[str]) -> None:
    target = seed_bpe_file(tmp_path, "cl100k_base")
    assert target.stat().st_size > 1_000_000
    assert_durable(target, synced)


def test_the_model_cache(tmp_path: Path, synced: list[str]) -> None:
    target = tmp_path / "model.int8.onnx"
    def save(tmp: Path) -> None:
        tmp.write_bytes(b"model bytes")

    onnx_model._write_atomically(target, save)
    assert target.read_bytes() == b"model bytes"
    assert_durable(target, synced)


WRITES_IN_PLACE = {"write_text", "write_bytes"}
ALLOWED: dict[str, set[str]] = {
    # module (relative to service/) -> functions that may write a path in place, and why
    "files.py": {"write_atomically"},  # the helper itself: it writes a temporary file, then renames
    "embeddings/onnx_model.py": {"_build_fp32"},  # writes the temporary path the helper hands it
    "cli/config_reference.py": {"write"},  # a developer's command regenerating docs/operations.md
    "cli/transfer.py": {"_export_into"},  # writes the temporary path the helper hands it
}


def _writes(tree: ast.AST) -> Iterator[tuple[str, int, str]]:
    """(function, line, call) of every ``open`` for writing and every ``Path.write_text/bytes``."""
    for func in ast.walk(tree):
        if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(func):
            if not isinstance(node, ast.Call):
                continue
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name in WRITES_IN_PLACE:
                yield func.name, node.lineno, name
            elif name in ("open", "fdopen") and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant):
                mode = str(node.args[1].value)
                if any(c in mode for c in "wx+"):
                    yield func.name, node.lineno, f"{name}({mode!r})"


def test_nothing_in_the_service_writes_a_file_in_place() -> None:
    found = []
    for path in sorted(SERVICE.rglob("*.py")):
        module = str(path.relative_to(SERVICE))
        for function, line, call in _writes(ast.parse(path.read_text())):
            if function not in ALLOWED.get(module, set()):
                found.append(f"service/{module}:{line} {function}: {call}")
    assert not found, "write through service.files.write_atomically instead:\n" + "\n".join(found)


@pytest.mark.parametrize("write", [ownership.claim], ids=["owner.pid"])
def test_a_failed_write_leaves_the_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            write: Callable[[Path], None]) -> None:
    (tmp_path / "owner.pid").write_text("1 2\n")

    def full(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError):
        write(tmp_path)
    assert (tmp_path / "owner.pid").read_text() == "1 2\n"
    assert [p.name for p in tmp_path.iterdir()] == ["owner.pid"]
