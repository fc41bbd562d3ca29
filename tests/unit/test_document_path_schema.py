"""The OpenAPI schema's document path pattern says what the service's path check takes, no more, no less:
a client (or a contract fuzzer) that follows the schema is never refused, and one that breaks it is."""

from __future__ import annotations

import re

from service.documents.ingest import check_path
from service.errors import BadRequest
from service.http.openapi_rules import DOCUMENT_PATH, STORED_DOCUMENT_PATH

SPECIAL = [0x2028, 0x2029, 0xFEFF, 0x200D, 0x1F600]


def accepted(path: str, *, stored: bool = False) -> bool:
    try:
        check_path(path, 1024, stored=stored)
    except BadRequest:
        return False
    return True


def test_the_schemas_document_paths_are_the_services_rules() -> None:
    """An ingest's path (``FileIn.path``), and a deletion's, which takes any path a document was stored
    under before C1 controls and line separators were refused."""
    paths = ["a/b.md", ".x/y", "..z", "...", "a//b", "./a", "../a", "a/..", "a\\b", "/a", "a/", "", "."]
    for code in [*range(0x250), *SPECIAL]:
        c = chr(code)
        paths += [f"a{c}b/c.md", f"{c}.md", f"x/{c}", f".{c}"]
    for schema, stored in ((DOCUMENT_PATH, False), (STORED_DOCUMENT_PATH, True)):
        pattern = re.compile(schema)
        differ = [p for p in paths if bool(pattern.match(p)) != accepted(p, stored=stored)]
        assert differ == [], (stored, [ascii(p) for p in differ[:10]])
    assert not accepted("notes/old\u2028.md") and not accepted("a\x85b") and accepted("café/naïve.md")
    assert accepted("notes/old\u2028.md", stored=True) and not accepted("a\x1fb", stored=True)
