"""Operator reports behind ``pgcontext orgs list``, ``keys list`` and ``config``.

The lists run as the owner role (its ``owner_admin`` policy sees every org); they never read a key's
hash, and a key is shown only by its id, label and display prefix (the first characters, stored in
clear for exactly this). ``config`` shows every setting as ``load_settings`` resolved it, the ones
marked secret in ``service/settings/`` masked (whole, or a DSN's password) and every other as it is.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit
from uuid import UUID

import asyncpg

from service.auth import admin
from service.cli.config_reference import SettingDoc, reference
from service.db.queries import query
from service.settings import Settings
from service.settings.env import SecretKind, secret_kind

MASK = "****"
_SECRET_QUERY_PARAM = re.compile(r"((?:^|&)[^=&]*(?:password|secret|token|key)[^=&]*=)[^&]*", re.IGNORECASE)
_KEYWORD_PASSWORD = re.compile(r"(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", re.IGNORECASE)


@dataclass(frozen=True)
class OrgRow:
    id: UUID
    name: str
    created_at: datetime
    active_keys: int
    revoked_keys: int
    memories: int
    document_chunks: int


@dataclass(frozen=True)
class KeyRow:
    id: UUID
    prefix: str
    name: str | None
    created_at: datetime
    last_used_at: datetime | None
    revoked_at: datetime | None


async def list_orgs(conn: asyncpg.Connection) -> list[OrgRow]:
    rows = await conn.fetch(query("admin.list_orgs"))
    return [OrgRow(**dict(r)) for r in rows]


async def list_keys(conn: asyncpg.Connection, org_name: str) -> list[KeyRow]:
    org_id = await admin.org_id_by_name(conn, org_name)
    rows = await conn.fetch(query("admin.list_keys"), org_id)
    return [KeyRow(**dict(r)) for r in rows]


def mask_dsn(value: str) -> str:
    """A URL or libpq keyword DSN with its password (userinfo, ``password=`` or secret query
    parameters) replaced by ``****``; everything else is kept as written."""
    if "://" not in value:
        return _KEYWORD_PASSWORD.sub(lambda m: m.group(1) + MASK, value)
    parts = urlsplit(value)
    userinfo, at, host = parts.netloc.rpartition("@")
    netloc = f"{userinfo.split(':', 1)[0]}:{MASK}@{host}" if at and ":" in userinfo else parts.netloc
    query = _SECRET_QUERY_PARAM.sub(lambda m: m.group(1) + MASK, parts.query)
    return (f"{parts.scheme}://{netloc}{parts.path}" + (f"?{query}" if query else "")
            + (f"#{parts.fragment}" if parts.fragment else ""))


def display_value(value: Any, secret: SecretKind | None = None) -> str:
    """What ``pgcontext config`` prints for a setting: None as empty, a tuple comma-separated (as it
    is given), a secret masked (``value``: whole; ``dsn``: each DSN's password)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    items = [str(v) for v in value] if isinstance(value, tuple) else [str(value)]
    if secret == "value":
        return MASK if any(items) else ""
    if secret == "dsn":
        items = [mask_dsn(item) for item in items]
    return ",".join(items)


@dataclass(frozen=True)
class ConfigLine:
    setting: str
    """``group.field`` in :class:`service.settings.Settings`."""
    env: str | None
    """The variable it is read from (None: fixed)."""
    value: str
    source: str
    """``environment``, ``default``, ``default (unset)`` or ``fixed``."""


def effective_config(settings: Settings, env: Mapping[str, str],
                     docs: Sequence[SettingDoc] | None = None) -> list[ConfigLine]:
    lines: list[ConfigLine] = []
    for doc in docs if docs is not None else reference():
        holder = operator.attrgetter(doc.group)(settings) if doc.group else settings
        value = display_value(getattr(holder, doc.field), secret_kind(holder, doc.field))
        if not doc.env:
            lines.append(ConfigLine(doc.path, None, value, "fixed"))
            continue
        given = [name for name in doc.env if env.get(name, "") != ""]
        source = "environment" if given else ("default (unset)" if value == "" else "default")
        lines.append(ConfigLine(doc.path, doc.env[0], value, source))
    return lines


def format_config(lines: Sequence[ConfigLine]) -> str:
    out = ["# pgcontext effective configuration (secrets masked). Source: environment or default."]
    width = max(len(f"{line.env}={line.value}") for line in lines if line.env)
    for line in lines:
        if line.env:
            out.append(f"{line.env}={line.value}".ljust(width) + f"  # {line.source}")
    out.append("# Fixed in code (not read from the environment):")
    out.extend(f"# {line.setting}={line.value}" for line in lines if not line.env)
    return "\n".join(out)


def format_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return "\n".join(fmt.format(*r).rstrip() for r in [list(header), *rows])


def stamp(value: datetime | None) -> str:
    return "" if value is None else value.isoformat(timespec="seconds")
