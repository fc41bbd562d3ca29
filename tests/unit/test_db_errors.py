"""SQLSTATE and client-side errors -> domain errors: what a dying or hung Postgres looks like to a caller."""

from __future__ import annotations

import asyncpg
import pytest

from service.db.errors import translate
from service.errors import ServiceUnavailable


@pytest.mark.parametrize("error", [
    asyncpg.InternalClientError("cannot switch to state 15; another operation (2) is in progress"),
    asyncpg.InterfaceError("cannot perform operation: another operation is in progress"),
    asyncpg.ConnectionDoesNotExistError("connection was closed in the middle of operation"),
    ConnectionResetError("reset by peer"),
    TimeoutError(),
])
def test_a_server_that_died_or_hangs_is_503_database_unavailable(error: BaseException) -> None:
    mapped = translate(error)
    assert isinstance(mapped, ServiceUnavailable) and mapped.code == "database_unavailable"
    assert mapped.retry_after_s == 1


def test_a_client_side_timeout_says_so() -> None:
    mapped = translate(TimeoutError())
    assert mapped is not None and mapped.details == {"timed_out": True}


def test_a_statement_postgres_cancelled_is_query_timeout() -> None:
    error = asyncpg.QueryCanceledError("canceling statement due to statement timeout")
    mapped = translate(error)
    assert isinstance(mapped, ServiceUnavailable) and mapped.code == "query_timeout"


def test_other_exceptions_are_not_database_errors() -> None:
    assert translate(ValueError("x")) is None


@pytest.mark.parametrize("sqlstate", [
    "42501",  # insufficient_privilege: also what a read-only volume (EROFS) gives a write
    "53100", "53200", "53300", "53400",  # insufficient resources: disk full, out of memory, connections
    "58030", "58P01", "58000",  # system errors: I/O, undefined file
    "25006",  # read_only_sql_transaction (a standby, default_transaction_read_only)
    "57P01", "57P02", "57P03",  # the server shuts down, crashed, is starting
    "XX000", "XX001", "XX002",  # internal error, data or index corrupted
])
def test_storage_and_permission_failures_are_503_with_retry_after_never_404(sqlstate: str) -> None:
    error = asyncpg.PostgresError.new({"C": sqlstate, "M": "from the server"})
    mapped = translate(error)
    assert isinstance(mapped, ServiceUnavailable), (sqlstate, mapped)
    assert mapped.status == 503 and mapped.retry_after_s is not None and mapped.retry_after_s >= 1
    assert mapped.headers()["Retry-After"] == str(mapped.retry_after_s)
    assert mapped.details["sqlstate"] == sqlstate
