"""Reading ``PGCONTEXT_*`` values: typed, bounded, with one error type for what cannot be used; and the
marker of settings that hold a secret."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any, Literal

SecretKind = Literal["value", "dsn"]
SECRET = "secret"
"""Metadata key of a settings field that holds a secret (see :func:`secret`)."""


class SettingsError(ValueError):
    """An environment variable holds a value that cannot be used."""


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask, e.g. a container's cpuset), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not on Linux
        return max(1, os.cpu_count() or 1)



def secret(kind: SecretKind, default: Any = None) -> Any:
    """A settings field that holds a secret, which ``pgcontext config`` masks: ``value`` (a password,
    API key or token) whole, ``dsn`` (a URL or libpq DSN, or a tuple of them) only its password.
    The names of settings say nothing about this: only this marker does."""
    return dataclasses.field(default=default, metadata={SECRET: kind})


def secret_kind(group: object, name: str) -> SecretKind | None:
    """How the field ``name`` of the settings group ``group`` is masked (None: it holds no secret)."""
    for f in dataclasses.fields(group):  # type: ignore[arg-type]
        if f.name == name:
            kind: SecretKind | None = f.metadata.get(SECRET)
            return kind
    raise AttributeError(f"{type(group).__name__} has no setting {name!r}")


def env_str(env: Mapping[str, str], name: str) -> str | None:
    value = env.get(name)
    return value if value not in (None, "") else None


def env_int(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env_str(env, name)
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError as exc:
        raise SettingsError(f"{name} must be an integer, got {raw!r}") from exc


def env_float(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env_str(env, name)
    if raw is None:
        return default
    try:
        return float(raw)
    except ValueError as exc:
        raise SettingsError(f"{name} must be a number, got {raw!r}") from exc


def env_list(env: Mapping[str, str], name: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in (env_str(env, name) or "").split(",") if part.strip())


def env_bool(env: Mapping[str, str], name: str, default: bool) -> bool:
    raw = env_str(env, name)
    if raw is None:
        return default
    if raw.lower() in {"1", "true", "yes", "on"}:
        return True
    if raw.lower() in {"0", "false", "no", "off"}:
        return False
    raise SettingsError(f"{name} must be a boolean, got {raw!r}")


def env_number_in(env: Mapping[str, str], name: str, default: float, low: float, high: float) -> float:
    """A finite number within ``[low, high]`` (else SettingsError: e.g. a negative BM25 k1 makes Postgres
    divide by zero in every lexical search)."""
    value = env_float(env, name, default)
    if not low <= value <= high:  # NaN fails both comparisons
        raise SettingsError(f"{name} must be between {low:g} and {high:g}, got {value!r}")
    return value


def env_int_in(env: Mapping[str, str], name: str, default: int, low: int, high: int) -> int:
    """An integer within ``[low, high]`` (else SettingsError)."""
    value = env_int(env, name, default)
    if not low <= value <= high:
        raise SettingsError(f"{name} must be between {low} and {high}, got {value}")
    return value


def env_at_least_one(env: Mapping[str, str], name: str, default: int) -> int:
    value = env_int(env, name, default)
    if value < 1:
        raise SettingsError(f"{name} must be at least 1, got {value}")
    return value

