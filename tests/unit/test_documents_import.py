"""The importer's pure parts: planning against a server listing, batching, and the CLI arguments."""

from __future__ import annotations

from pathlib import Path

from service.cli.main import build_parser
from service.documents.chunking import content_hash
from service.documents.importer import ServerFile, batches, plan
from service.documents.walk import WalkedFile


def test_plan_sends_new_and_changed_files_and_deletes_vanished_ones(tmp_path: Path) -> None:
    (tmp_path / ".gitignore").write_text("ignored/\n")
    (tmp_path / "ignored").mkdir()
    (tmp_path / "ignored" / "x.py").write_text("x = 1\n")
    (tmp_path / "same.py").write_text("same\n")
    (tmp_path / "changed.py").write_text("new\n")
    (tmp_path / "new.py").write_text("brand new\n")
    (tmp_path / "blob.bin").write_bytes(b"\x00\x01")
    server = {
        "same.py": ServerFile(content_hash("same\n"), None, "m1"),
        "changed.py": ServerFile(content_hash("old\n"), None, "m1"),
        "gone.py": ServerFile(content_hash("gone\n"), None, "m1"),
        ".gitignore": ServerFile(content_hash("ignored/\n"), None, "m1"),
    }
    p = plan(tmp_path, server, agent_id=None, embedder="m1", max_file_bytes=1000, delete=True)
    assert [f.path for f in p.send] == ["changed.py", "new.py"]
    assert sorted(p.unchanged) == ["same.py"]
    # .gitignore is version-control metadata: not imported by default, so a mirror deletes its old copy
    assert p.delete == [".gitignore", "gone.py"] and p.scanned == 3
    assert [(s.path, s.reason) for s in p.skipped] == [(".gitignore", "vcs"), ("blob.bin", "binary")]
    with_vcs = plan(tmp_path, server, agent_id=None, embedder="m1", max_file_bytes=1000, delete=True,
                    include_vcs=True)
    assert sorted(with_vcs.unchanged) == [".gitignore", "same.py"] and with_vcs.delete == ["gone.py"]
    # another owner or another embedder makes an unchanged file worth sending again
    assert [f.path for f in plan(tmp_path, server, agent_id="bot", embedder="m1", max_file_bytes=1000,
                                 delete=False).send] == ["changed.py", "new.py", "same.py"]
    assert "same.py" in [f.path for f in plan(tmp_path, server, agent_id=None, embedder="m2", max_file_bytes=1000,
                                              delete=False).send]
    assert plan(tmp_path, server, agent_id=None, embedder="m1", max_file_bytes=1000, delete=False).delete == []
    # a file an earlier chunking version cut is sent again, to be cut again
    older = {**server, "same.py": ServerFile(content_hash("same\n"), None, "m1", chunker=0)}
    assert "same.py" in [f.path for f in plan(tmp_path, older, agent_id=None, embedder="m1", max_file_bytes=1000,
                                              delete=False, chunker=1).send]
    current = {**server, "same.py": ServerFile(content_hash("same\n"), None, "m1", chunker=1)}
    assert plan(tmp_path, current, agent_id=None, embedder="m1", max_file_bytes=1000, delete=False,
                chunker=1).unchanged == ["same.py"]


def test_batches_respect_file_and_byte_limits() -> None:
    files = [WalkedFile(path=f"f{i}", content="x" * size, size=size) for i, size in enumerate([10, 10, 10, 50, 5])]
    assert [[f.path for f in b] for b in batches(files, max_files=2, max_bytes=1000)] == [
        ["f0", "f1"], ["f2", "f3"], ["f4"]]
    assert [[f.path for f in b] for b in batches(files, max_files=10, max_bytes=25)] == [
        ["f0", "f1"], ["f2"], ["f3"], ["f4"]]
    assert batches([], max_files=2, max_bytes=10) == []


def test_cli_import_arguments() -> None:
    args = build_parser().parse_args(["import", "repo", "--collection", "main", "--agent-id", "coder",
                                      "--no-delete", "--quiet", "--url", "http://x:1", "--key", "k"])
    assert (args.path, args.collection, args.agent_id, args.no_delete, args.quiet, args.url, args.key) == (
        "repo", "main", "coder", True, True, "http://x:1", "k")
    defaults = build_parser().parse_args(["import", "."])
    assert defaults.collection == "default" and defaults.batch_files == 64 and not defaults.no_delete
    assert not defaults.include_vcs and build_parser().parse_args(["import", ".", "--include-vcs"]).include_vcs
