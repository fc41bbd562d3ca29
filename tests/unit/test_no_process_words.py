"""The project's files speak to users, not of how the work was organised.

Docs, code comments, docstrings, test names and log text say what the product does, how to run it
and what it measures. They do not cite work sessions, tracker issues, the people or agents who did
the work, the machines it was done on ("the VM", "this machine") or commits as history ("against
<hash>"): users see none of those, and git keeps the history. This test scans every tracked text
file for those words, and keeps the README and the benchmarks page small.

The patterns are narrow on purpose: "session" alone is a Redis or HTTP session, ``session_id`` a
field, a "test helper" a function, and hex strings in tests are ids. Only the diary forms match:
"session" or "issue" followed by a number, a 7-character hex token (git's short hash), or a hex
token right after words such as "against" or "main at". This file holds the patterns, so it is the
one file not scanned.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
THIS = Path(__file__).resolve()

_HEX = r"(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]"
"""A lower-case hex token with at least one letter and one digit (not a plain number or word)."""

PROCESS_WORDS: dict[str, re.Pattern[str]] = {
    "a work session by number": re.compile(r"\bsessions?\s+\d+", re.IGNORECASE),
    "a tracker issue by number": re.compile(r"\bissues?\s+#?\d+", re.IGNORECASE),
    "a tracker issue in brackets": re.compile(r"\(issue\b", re.IGNORECASE),
    "a work session": re.compile(r"\bwork[- ]sessions?\b", re.IGNORECASE),
    "agents who did the work": re.compile(r"\bsub-?agents?\b|\bhelper[- ]agents?\b", re.IGNORECASE),
    "helpers as people": re.compile(r"\bhelpers'|\bother helpers\b", re.IGNORECASE),
    "a virtual machine": re.compile(r"\bVMs?\b"),
    "this machine": re.compile(r"\bthis (?:machine|box|host)\b", re.IGNORECASE),
    "a commit as history": re.compile(
        rf"(?<![\w./-]){_HEX}{{7}}(?![\w-])"
        rf"|\b(?:against|versus|vs\.?|at|main|commit|archive|since|before|after|baseline|tree)\s+`?{_HEX}{{7,12}}\b",
        re.IGNORECASE),
    "a work branch": re.compile(r"\bbranch\s+`?h/[a-z]", re.IGNORECASE),
    "a numbered failure of a work item": re.compile(
        r"\bfailures?\s+\d+(?:\s*(?:-|and|,)\s*\d+)*\s*[:)]", re.IGNORECASE),
}

SCANNED_TOPS = ("README.md", "docs", "service", "tests", "benchmarks", "client", "clients", "migrations", "sql",
                "Makefile", "Dockerfile", "docker-compose.yml", "pyproject.toml", "setup.py", "alembic.ini",
                ".env.example", ".ci")
SKIPPED_PARTS = {".git", ".venv", "__pycache__", ".pgcontext", "node_modules", "build", "dist"}

README_MAX_LINES = 220
BENCHMARKS_MAX_LINES = 520


def tracked_files() -> list[Path]:
    """The files git tracks (or would: new and not ignored) under the scanned tops; every file there when
    git is not available."""
    try:
        listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--",
                                 *SCANNED_TOPS], cwd=ROOT, capture_output=True, check=True,
                                timeout=60).stdout.decode().split("\0")
        files = [ROOT / name for name in listed if name]
    except (OSError, subprocess.SubprocessError):
        files = []
        for top in SCANNED_TOPS:
            path = ROOT / top
            candidates = [path] if path.is_file() else path.rglob("*") if path.is_dir() else []
            files += [p for p in candidates if p.is_file() and not SKIPPED_PARTS & set(p.relative_to(ROOT).parts)]
    return [f for f in files if f.resolve() != THIS and f.is_file()]


def text_of(path: Path) -> str | None:
    """The file's text, or None for a binary file."""
    data = path.read_bytes()
    if b"\0" in data:
        return None
    try:
        return data.decode()
    except UnicodeDecodeError:
        return None


def hits(text: str) -> list[tuple[int, str, str]]:
    """(line number, what, the matched words) of every process word in ``text``."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        for what, pattern in PROCESS_WORDS.items():
            match = pattern.search(line)
            if match:
                found.append((number, what, match.group(0)))
    return found


@pytest.mark.parametrize("line", [
    "### Session 15 (issue 17, 2026-12-04, afternoon): a full hybrid by part",
    "Measured in sessions 9-13 on two cores.",
    "See issue #12 for the acceptance.",
    "rerun with today's code against 634c972",
    "old is main at `efcd963` (`git archive`)",
    "the tree 3a04631 before the change",
    "on the shared 2-core VM at load average 10",
    "Two VMs later the numbers held.",
    "other helpers' test runs were niced",
    "a subagent ran the fuzzing",
    "as far as this machine allows",
    "branch `h/fusion` with the new default",
    "the collapse (issue 14, failures 2 and 7)",
    "# Failure 7: connections went back rolled back.",
    "a work session ended early",
])
def test_the_patterns_catch_diary_words(line: str) -> None:
    assert hits(line), line


@pytest.mark.parametrize("line", [
    "The Redis session pool and the HTTP session are closed at shutdown.",
    "session_id = request.headers['x-session']",
    "an OpenAI Agents SDK session, as the mission asks",
    "def make_key(self) -> str:  # a test helper",
    "from tests.faults.helpers import paused",
    "org = UUID('01a2433e-92c1-7575-b4bd-f31457229a16')",
    "assert digest == 'ab12cd34'",
    "issued = admin.create_key(conn, 'acme'); print(issued.key)",
    "the JVM and the KVM hypervisor",
    "the test session's Postgres and Redis",
    "one failure opens nothing: three failures in a row open the circuit",
    "see redis/redis-py#4287 and citusdata/citus#5705",
    "schemathesis/schemathesis#4391 reports the flag having no effect",
    "the machine it runs on",
])
def test_the_patterns_leave_ordinary_words_alone(line: str) -> None:
    assert not hits(line), hits(line)


def test_no_file_speaks_of_the_work_process() -> None:
    files = tracked_files()
    assert any(f.name == "README.md" for f in files) and any(f.suffix == ".py" for f in files)
    found = []
    for path in files:
        text = text_of(path)
        if text is None:
            continue
        found += [f"{path.relative_to(ROOT)}:{n}: {what}: {words!r}" for n, what, words in hits(text)]
    assert not found, ("Say what the product does, not how the work went (history lives in git):\n"
                       + "\n".join(found))


def test_the_readme_and_the_benchmarks_page_stay_small() -> None:
    readme = len((ROOT / "README.md").read_text().splitlines())
    benchmarks = len((ROOT / "docs" / "benchmarks.md").read_text().splitlines())
    assert readme <= README_MAX_LINES, (
        f"README.md has {readme} lines (at most {README_MAX_LINES}): move detail to docs/")
    assert benchmarks <= BENCHMARKS_MAX_LINES, (
        f"docs/benchmarks.md has {benchmarks} lines (at most {BENCHMARKS_MAX_LINES}): keep current figures, "
        "record decisions in the docs of their area, leave the history to git")
