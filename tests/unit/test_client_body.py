"""The Python client's request bodies: what JSON in UTF-8 cannot carry is refused before anything is sent."""

from __future__ import annotations

import pytest
from pgcontext_client import AsyncClient, Client, ValidationError

UNREACHABLE = "http://127.0.0.1:9"  # nothing listens: a request that went out would be a TransportError


def test_a_lone_surrogate_is_a_validation_error_and_nothing_is_sent() -> None:
    with Client(UNREACHABLE, "key") as pg, pytest.raises(ValidationError) as raised:
        pg.create_memory("an emoji cut in half: \ud83d")
    assert raised.value.code == "validation_error" and "U+D83D" in raised.value.message


async def test_the_async_client_too() -> None:
    async with AsyncClient(UNREACHABLE, "key") as pg:
        with pytest.raises(ValidationError, match="lone surrogate"):
            await pg.append_messages("chat", [{"role": "user", "content": "\udc00"}])
