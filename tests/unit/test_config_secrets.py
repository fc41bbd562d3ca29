"""``pgcontext config`` masks exactly the settings marked secret in ``service/settings/``, whatever
their names: a numeric ``..._PER_TOKEN`` or a metadata ``speaker_key`` is shown as it is, and a new
setting that holds a secret cannot be added without being marked and listed here."""

from __future__ import annotations

import dataclasses
import operator
import re
import typing
from typing import Any

from service import settings as settings_module
from service.cli.config_reference import reference
from service.cli.ops import MASK, effective_config, mask_dsn
from service.settings import load_settings

SECRETS = {
    "database.url": "dsn",
    "database.app_url": "dsn",
    "database.app_role_password": "value",
    "database.read_urls": "dsn",
    "redis.url": "dsn",
    "embedding.api_base": "dsn",
    "embedding.api_key": "value",
    "server.metrics_token": "value",
    "retrieval.rerank.api_base": "dsn",
    "retrieval.rerank.api_key": "value",
    "facts.consolidation_api_base": "dsn",
    "facts.consolidation_api_key": "value",
}
"""Every secret setting: ``value`` is masked whole, ``dsn`` (URLs, libpq DSNs) has its password masked."""

NAMED_LIKE_A_SECRET = {
    "retrieval.speaker_key": "the metadata key that names a speaker",
    "documents.tokenizer": "the name of a tiktoken encoding",
}
"""Settings whose names look like a secret's but are not one, each with the reason."""

_SECRET_LOOKING = re.compile(r"password|secret|token|key|url|dsn|credential|api_base", re.IGNORECASE)

GIVEN = {
    "PGCONTEXT_DATABASE_URL": "postgresql://owner:Own3r-pw@db.internal:5432/pgc",
    "PGCONTEXT_APP_DATABASE_URL": "host=db user=pgcontext_app password=App-pw-9 dbname=pgc",
    "PGCONTEXT_APP_ROLE_PASSWORD": "Role-pw-7",
    "PGCONTEXT_READ_DATABASE_URLS": "postgresql://app:Rep1-pw@r1/pgc,postgresql://app:Rep2-pw@r2/pgc",
    "PGCONTEXT_REDIS_URL": "redis://:Redis-pw-3@cache:6379/0",
    "PGCONTEXT_EMBEDDING_API_BASE": "https://proxy:Proxy-pw-5@embed.example/v1",
    "PGCONTEXT_EMBEDDING_API_KEY": "sk-live-abcdef123456",
    "PGCONTEXT_METRICS_TOKEN": "Metrics-tok-1",
    "PGCONTEXT_RERANK_PROVIDER": "cohere",
    "PGCONTEXT_RERANK_MODEL": "rerank-v3.5",
    "PGCONTEXT_RERANK_API_KEY": "co-key-42",
    "PGCONTEXT_RETRIEVAL_SPEAKER_KEY": "author",
    "PGCONTEXT_RATE_LIMIT_EMBED_CHARS_PER_TOKEN": "41",
    "PGCONTEXT_CONSOLIDATION_API_BASE": "https://gw:Gw-pw-8@llm.example/v1",
    "PGCONTEXT_CONSOLIDATION_API_KEY": "sk-cons-778899",
}
SECRET_PARTS = ("Own3r-pw", "App-pw-9", "Role-pw-7", "Rep1-pw", "Rep2-pw", "Redis-pw-3", "Proxy-pw-5",
                "sk-live-abcdef123456", "Metrics-tok-1", "co-key-42", "Gw-pw-8", "sk-cons-778899")


def marked() -> dict[str, str]:
    """``group.field`` -> the ``secret`` metadata of every settings field that carries it."""
    found: dict[str, str] = {}

    def walk(value: Any, path: tuple[str, ...]) -> None:
        for f in dataclasses.fields(value):
            inner = getattr(value, f.name)
            if dataclasses.is_dataclass(inner):
                walk(inner, (*path, f.name))
            elif "secret" in f.metadata:
                found[".".join((*path, f.name))] = f.metadata["secret"]

    walk(settings_module.Settings(), ())
    return found


def holds_text(group_class: str, name: str) -> bool:
    hint = typing.get_type_hints(getattr(settings_module, group_class))[name]
    kinds = {hint, *typing.get_args(hint)}
    return str in kinds or any(str in typing.get_args(k) for k in kinds)


def test_exactly_the_listed_settings_are_marked_secret() -> None:
    assert marked() == SECRETS


def test_a_text_setting_named_like_a_secret_is_marked_or_explained() -> None:
    """Adding e.g. ``PGCONTEXT_WEBHOOK_TOKEN`` without marking it fails here (and marking it fails the
    test above until it is listed)."""
    suspects = {doc.path for doc in reference()
                if _SECRET_LOOKING.search(doc.field) and holds_text(doc.group_class, doc.field)}
    assert suspects - set(SECRETS) - set(NAMED_LIKE_A_SECRET) == set()
    assert set(NAMED_LIKE_A_SECRET) <= suspects  # no stale entry


def plain(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return ",".join(map(str, value))
    return str(value)


def test_config_masks_the_secret_settings_and_shows_every_other_as_it_is() -> None:
    settings = load_settings(GIVEN)
    lines = {line.setting: line for line in effective_config(settings, GIVEN)}
    assert set(lines) == {doc.path for doc in reference()}
    for path, line in lines.items():
        group, _, field = path.rpartition(".")
        value = getattr(operator.attrgetter(group)(settings) if group else settings, field)
        kind = SECRETS.get(path)
        if kind == "value":
            assert line.value == (MASK if value else ""), path
        elif kind == "dsn":
            expected = ",".join(mask_dsn(v) for v in value) if isinstance(value, tuple) else mask_dsn(value or "")
            assert line.value == expected, path
        else:
            assert line.value == plain(value), path
    shown = "\n".join(f"{line.setting}={line.value}" for line in lines.values())
    assert not [part for part in SECRET_PARTS if part in shown]
    assert lines["rate_limit.embed_chars_per_token"].value == "41"
    assert lines["rate_limit.body_bytes_per_token"].value == "16384"
    assert lines["retrieval.speaker_key"].value == "author"
    assert lines["database.read_urls"].value == "postgresql://app:****@r1/pgc,postgresql://app:****@r2/pgc"
    assert lines["embedding.api_base"].value == "https://proxy:****@embed.example/v1"
