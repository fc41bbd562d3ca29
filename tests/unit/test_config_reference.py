"""The configuration reference in docs/operations.md: generated from the settings package, complete and current."""

from __future__ import annotations

import operator
import re
import typing
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from service import settings as settings_module
from service.cli import config_reference
from service.cli.config_reference import DOC_PATH, SettingDoc, current_block, reference, render_block
from service.cli.ops import display_value, mask_dsn
from service.settings import load_settings

ROOT = Path(__file__).resolve().parents[2]


class RecordingEnv(Mapping[str, str]):
    """An empty environment that remembers every name load_settings asks for."""

    def __init__(self, values: dict[str, str] | None = None) -> None:
        self.given = values or {}
        self.asked: list[str] = []

    def __getitem__(self, name: str) -> str:
        self.asked.append(name)
        return self.given[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.given)

    def __len__(self) -> int:
        return len(self.given)


def names_load_settings_reads() -> set[str]:
    env = RecordingEnv()
    load_settings(env)
    return set(env.asked)


def test_the_reference_pairs_exactly_the_variables_load_settings_reads() -> None:
    """The ast mapping agrees with what load_settings really asks the environment for."""
    read = names_load_settings_reads()
    assert read and all(name.startswith("PGCONTEXT_") for name in read)
    documented = {name for doc in reference() for name in doc.env}
    assert documented == read
    assert set(config_reference.env_names_read()) == read  # none read outside a field


def test_every_variable_is_in_docs_operations_md() -> None:
    text = DOC_PATH.read_text()
    missing = sorted(name for name in names_load_settings_reads() if f"`{name}`" not in text)
    assert not missing, f"not in docs/operations.md: {missing}; run `make docs`"


def test_the_generated_block_is_current() -> None:
    assert current_block() == render_block(), "docs/operations.md is stale: run `make docs`"


def test_every_setting_is_listed_with_a_docstring() -> None:
    runtime = set(config_reference.settings_fields())
    listed = {(doc.group, doc.field) for doc in reference()}
    assert listed == runtime
    undocumented = [doc.path for doc in reference() if not doc.doc]
    assert not undocumented, f"settings without a docstring: {undocumented}"


def _probe(doc: SettingDoc, current: Any) -> tuple[str, Any]:
    """An environment value for the field unlike its default, and what load_settings should make of it."""
    hint = typing.get_type_hints(getattr(settings_module, doc.group_class))[doc.field]
    args = set(typing.get_args(hint))
    if typing.get_origin(hint) is typing.Literal:
        other = next(a for a in typing.get_args(hint) if a != current)
        return str(other), other
    if hint is bool:
        return ("false", False) if current else ("true", True)
    if hint is int:
        return "7", 7
    if hint is float:
        return "0.625", 0.625
    if Path in args or hint is Path:
        return "/tmp/pgcontext-probe", Path("/tmp/pgcontext-probe")
    if typing.get_origin(hint) is tuple:  # comma-separated
        return "probe-a,probe-b", ("probe-a", "probe-b")
    assert hint is str or str in args, (doc.path, hint)
    return "probe-value", "probe-value"


# Variables whose other values need a companion to be valid (load_settings checks them together).
COMPANIONS = {"PGCONTEXT_RERANK_PROVIDER": {"PGCONTEXT_RERANK_API_BASE": "http://127.0.0.1:9",
                                            "PGCONTEXT_RERANK_MODEL": "probe-model"},
              "PGCONTEXT_REDIS_CLUSTER": {"PGCONTEXT_REDIS_URL": "redis://127.0.0.1:7000"}}


@pytest.mark.parametrize("doc", [d for d in reference() if d.env], ids=lambda d: d.env[0])
def test_each_variable_sets_the_field_it_is_documented_for(doc: SettingDoc) -> None:
    defaults = load_settings({})
    holder = operator.attrgetter(doc.group)(defaults) if doc.group else defaults
    raw, expected = _probe(doc, getattr(holder, doc.field))
    loaded = load_settings({doc.env[0]: raw, **COMPANIONS.get(doc.env[0], {})})
    assert getattr(operator.attrgetter(doc.group)(loaded) if doc.group else loaded, doc.field) == expected


def test_defaults_are_what_an_empty_environment_gives() -> None:
    by_env = {doc.env[0]: doc for doc in reference() if doc.env}
    assert by_env["PGCONTEXT_PORT"].default == "8080"
    assert by_env["PGCONTEXT_DATABASE_URL"].default == "unset"
    assert by_env["PGCONTEXT_EMBEDDING_QUANTIZE"].default == "true"
    assert by_env["PGCONTEXT_ASSEMBLY_MAX_IN_FLIGHT"].default == "`2 * usable_cpus()`"  # machine-dependent
    assert by_env["PGCONTEXT_DEADLINE_MS"].doc.startswith("Outer wall of one assembly")


def test_write_rewrites_only_the_marked_block(tmp_path: Path) -> None:
    doc = tmp_path / "ops.md"
    doc.write_text(f"# Title\n\nbefore\n\n{config_reference.BEGIN}\nold stuff\n{config_reference.END}\n\nafter\n")
    assert config_reference.main(["--check", "--path", str(doc)]) == 1
    assert config_reference.write(doc) is True
    text = doc.read_text()
    assert text.startswith("# Title\n\nbefore\n\n") and text.endswith("\n\nafter\n")
    assert "old stuff" not in text and "`PGCONTEXT_DATABASE_URL`" in text
    assert config_reference.write(doc) is False
    assert config_reference.main(["--check", "--path", str(doc)]) == 0


def test_variables_read_outside_settings_are_documented_too() -> None:
    """The CLI's client-side variables (and any other literal PGCONTEXT_* name in service/) are in the guide."""
    text = DOC_PATH.read_text()
    names = {m for p in (ROOT / "service").rglob("*.py") for m in re.findall(r"PGCONTEXT_[A-Z0-9_]+", p.read_text())}
    missing = sorted(n for n in names if n not in text)
    assert not missing, f"not in docs/operations.md: {missing}"


def test_every_variable_the_service_or_client_reads_is_known() -> None:
    """What :func:`unknown_variables` warns about is what nothing reads: every literal ``PGCONTEXT_*`` name of
    service/ and the Python client is read by load_settings or listed in READ_ELSEWHERE, which holds
    the names of the guide's table of variables read outside the settings."""
    sources = [*(ROOT / "service").rglob("*.py"), *(ROOT / "client").rglob("*.py")]
    names = {m for p in sources for m in re.findall(r"PGCONTEXT_[A-Z0-9]+(?:_[A-Z0-9]+)*\b", p.read_text())}
    known = names_load_settings_reads() | set(config_reference.READ_ELSEWHERE)
    assert sorted(names - known) == []
    table = DOC_PATH.read_text().split("Variables read outside the settings:", 1)[1].split("\n\n", 2)[1]
    listed = {n for row in table.splitlines() for n in re.findall(r"`(PGCONTEXT_[A-Z0-9_]+)`", row.split("|")[1])}
    assert listed - names_load_settings_reads() == set(config_reference.READ_ELSEWHERE)  # alembic's DSN is both


def test_unknown_variables_are_named_with_the_closest_known_one() -> None:
    env = {"PGCONTEXT_RATE_LIMT_RPS": "3", "PGCONTEXT_APIKEY": "k", "PGCONTEXT_SOMETHING_ELSE": "1",
           "PGCONTEXT_PORT": "8081", "PGCONTEXT_URL": "http://h", "PATH": "/bin", "RATE_LIMT": "x"}
    assert config_reference.unknown_variables(env) == [
        "warning: PGCONTEXT_APIKEY is not a pgcontext variable and is ignored (did you mean PGCONTEXT_API_KEY?)",
        "warning: PGCONTEXT_RATE_LIMT_RPS is not a pgcontext variable and is ignored "
        "(did you mean PGCONTEXT_RATE_LIMIT_RPS?)",
        "warning: PGCONTEXT_SOMETHING_ELSE is not a pgcontext variable and is ignored",
    ]
    assert config_reference.unknown_variables({name: "1" for name in names_load_settings_reads()}) == []


@pytest.mark.parametrize(("value", "masked"), [
    ("postgresql://u:p%40ss@h:5432/db", "postgresql://u:****@h:5432/db"),
    ("postgresql://u@h/db", "postgresql://u@h/db"),
    ("postgresql:///db?host=/run&password=x1", "postgresql:///db?host=/run&password=****"),
    ("postgresql://h/db?sslpassword=a&sslmode=require", "postgresql://h/db?sslpassword=****&sslmode=require"),
    ("redis://:pw@h:6379/0", "redis://:****@h:6379/0"),
    ("rediss://user:pw@h/0?ssl_cert_reqs=none", "rediss://user:****@h/0?ssl_cert_reqs=none"),
    ("host=h password='a b c' user=u", "host=h password=**** user=u"),
    ("host=h password=abc", "host=h password=****"),
    ("https://api.example.com/v1", "https://api.example.com/v1"),
])
def test_dsn_masking(value: str, masked: str) -> None:
    assert mask_dsn(value) == masked


def test_secrets_are_masked_by_their_marker_whatever_their_value() -> None:
    assert display_value("sk-123", "value") == "****"
    assert display_value("postgresql://u:pw@h/db", "value") == "****"
    assert display_value(None, "value") == ""
    assert display_value(("redis://:a@h/0", "redis://h/1"), "dsn") == "redis://:****@h/0,redis://h/1"
    assert display_value("host=h password=abc", None) == "host=h password=abc"  # not a secret setting
    assert display_value(8080) == "8080"
