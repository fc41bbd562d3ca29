"""The edge refusal's header parsing (the refusal itself runs against a real server in
tests/integration/test_overload.py)."""

from __future__ import annotations

import time

from service.assembly.shedding import caller_left_ms
from service.http.edge import request_id


def test_the_callers_remaining_time_comes_from_either_header_and_the_sooner_wins() -> None:
    assert caller_left_ms([(b"content-type", b"application/json")]) is None
    assert caller_left_ms([(b"x-timeout-ms", b"250")]) == 250
    soon = str(int(time.time() * 1000) + 100).encode()
    left = caller_left_ms([(b"x-timeout-ms", b"5000"), (b"x-deadline-ms", soon)])
    assert left is not None and 0 < left <= 100
    assert caller_left_ms([(b"x-timeout-ms", b"soon")]) is None  # the handler answers that one's 400


def test_the_request_id_is_the_callers_or_a_new_one() -> None:
    assert request_id([(b"x-request-id", b"abc")]) == "abc"
    assert request_id([(b"x-request-id", b"x" * 100)]) == "x" * 64
    generated = request_id([])
    assert len(generated) == 32 and generated != request_id([])
