"""Replica routing pieces that need no server: the settings, the LSN encoding Redis compares, the key's
hash tag, and which replica errors send a read back to the primary."""

from __future__ import annotations

import uuid

import asyncpg

from service.db.replicas import _hex, is_lost, lsn_key
from service.settings import load_settings


def test_read_urls_parse_comma_separated() -> None:
    s = load_settings({"PGCONTEXT_READ_DATABASE_URLS": " postgresql://a/db , postgresql://b/db,,",
                       "PGCONTEXT_READ_MAX_LAG_MS": "250"})
    assert s.database.read_urls == ("postgresql://a/db", "postgresql://b/db")
    assert s.database.read_max_lag_ms == 250
    assert load_settings({}).database.read_urls == ()


def test_lsn_strings_order_like_the_numbers() -> None:
    values = [0, 1, 0x16B3_7A28, 0x1_0000_0000, 2**53 + 1, 2**64 - 1]
    encoded = [_hex(v) for v in values]
    assert encoded == sorted(encoded) and all(len(e) == 16 for e in encoded)
    assert int(_hex(2**53 + 1), 16) == 2**53 + 1  # no float rounding, unlike Lua numbers


def test_lsn_key_is_hash_tagged_by_org() -> None:
    org = uuid.uuid4()
    assert lsn_key(org) == f"{{{org}}}:pg:write_lsn"


def test_connection_loss_and_recovery_conflicts_fall_back() -> None:
    assert is_lost(ConnectionRefusedError())
    assert is_lost(asyncpg.exceptions.AdminShutdownError("terminating connection"))  # 57P01
    assert is_lost(asyncpg.exceptions.CannotConnectNowError("starting up"))  # 57P03
    assert is_lost(asyncpg.exceptions.SerializationError("conflict with recovery"))  # 40001
    assert is_lost(asyncpg.exceptions.ConnectionDoesNotExistError("closed"))
    assert not is_lost(asyncpg.exceptions.QueryCanceledError("statement timeout"))  # the branch's own deadline
    assert not is_lost(asyncpg.exceptions.UniqueViolationError("dup"))
    assert not is_lost(ValueError("a bug"))
