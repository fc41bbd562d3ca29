"""``pgcontext serve``'s start-up pieces in process: the listen check on real sockets, and which of
uvicorn's lines its logging configuration keeps."""

from __future__ import annotations

import logging
import socket
import subprocess
import sys

import pytest

from service.cli.serve import ListenError, check_listen_address
from service.cli.uvicorn_logs import UvicornChatter, uvicorn_log_config


def test_the_listen_check_refuses_a_port_in_use_and_lets_a_free_one_go() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ListenError, match=rf"^cannot listen on 127\.0\.0\.1:{port}: address already in use"):
            check_listen_address("127.0.0.1", port)
    check_listen_address("127.0.0.1", port)  # released: free again, and the check holds nothing
    with socket.socket() as again:
        again.bind(("127.0.0.1", port))


def test_the_listen_check_names_an_address_that_is_not_local() -> None:
    with pytest.raises(ListenError, match=r"^cannot listen on 192\.0\.2\.1:8080: "):
        check_listen_address("192.0.2.1", 8080)  # TEST-NET-1: never a local address


def record(message: str, *args: object, level: int = logging.INFO) -> logging.LogRecord:
    return logging.LogRecord("uvicorn.error", level, __file__, 1, message, args, None)


@pytest.mark.parametrize(("message", "args"), [
    ("Started server process [%d]", (7,)),
    ("Waiting for application startup.", ()),
    ("Application startup complete.", ()),
    ("Uvicorn running on %s://%s:%d (Press CTRL+C to quit)", ("http", "127.0.0.1", 8080)),
    ("Started parent process [7]", ()),
    ("Shutting down", ()),
    ("Waiting for application shutdown.", ()),
    ("Application shutdown complete.", ()),
    ("Finished server process [%d]", (7,)),
    ("Waiting for child process [8]", ()),
    ("Received SIGTERM, exiting.", ()),
])
def test_uvicorn_start_and_stop_lines_are_dropped(message: str, args: tuple[object, ...]) -> None:
    assert not UvicornChatter().filter(record(message, *args))


def test_uvicorn_lines_about_trouble_pass() -> None:
    chatter = UvicornChatter()
    assert chatter.filter(record("Child process [8] died"))  # a worker replaced: worth seeing
    assert chatter.filter(record("Application startup failed. Exiting.", level=logging.ERROR))
    assert chatter.filter(record("Started server process [%d]", 7, level=logging.WARNING))


def test_the_filter_is_on_uvicorn_s_logger_except_at_debug() -> None:
    """Named by the module that holds it, which a worker imports before it answers its first health check."""
    assert uvicorn_log_config("info")["loggers"]["uvicorn.error"]["filters"] == ["chatter"]
    assert uvicorn_log_config("WARNING")["loggers"]["uvicorn.error"]["filters"] == ["chatter"]
    assert "filters" not in uvicorn_log_config("debug")["loggers"]["uvicorn.error"]


def test_the_filter_s_module_is_light_to_import() -> None:
    """A ``--workers`` worker imports it while it configures logging, before its health-check thread
    runs: the app's modules there (seconds on a busy host) got workers killed as hung, again and again."""
    probe = ("import sys, service.cli.uvicorn_logs; "
             "print(sorted(m for m in sys.modules if m.split('.')[0] in ('service', 'litestar', 'asyncpg')))")
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "['service', 'service.cli', 'service.cli.uvicorn_logs']"
