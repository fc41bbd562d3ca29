"""Schemathesis hooks: the schema's own string formats (loaded through ``schemathesis.toml``).

A page cursor is ``next_cursor`` from an earlier page; the schema documents its encoding under a
format of its own (see ``service.http.openapi``). These strategies make cursors of exactly that form --
positions that may or may not hold rows -- so generated requests use cursors the service could have
issued, as the schema says, and anything else is negative data.
"""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime

import schemathesis
from hypothesis import strategies as st


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


_TEXT = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\x00"), max_size=40)

schemathesis.openapi.format("pgcontext-memories-cursor", st.builds(
    lambda at, ident: _b64(f"{at.isoformat()}|{ident}".encode()),
    st.datetimes(min_value=datetime(1900, 1, 1), max_value=datetime(2200, 1, 1), timezones=st.just(UTC)),
    st.uuids()))
schemathesis.openapi.format("pgcontext-history-cursor", st.builds(lambda ident: _b64(ident.bytes), st.uuids()))
schemathesis.openapi.format("pgcontext-documents-cursor", st.builds(
    lambda collection, path: _b64(json.dumps([collection, path], ensure_ascii=False).encode()), _TEXT, _TEXT))
schemathesis.openapi.format("pgcontext-conversations-cursor", st.builds(
    lambda at, ident: _b64(f"{at.isoformat()}|{ident}".encode()),
    st.datetimes(min_value=datetime(1900, 1, 1), max_value=datetime(2200, 1, 1), timezones=st.just(UTC)),
    st.from_regex(r"[A-Za-z0-9_.:@-]{1,40}", fullmatch=True)))
schemathesis.openapi.format("pgcontext-messages-cursor", st.builds(
    lambda position: _b64(str(position).encode()), st.integers(min_value=0, max_value=10**18 - 1)))
