"""The parts of the OpenAPI contract that validation code decides: limits read from the running
settings, and the rules checked in code (not blank, no NUL, path form, cross-field forms), stated in
the schema Litestar built so that it says exactly what the service accepts (see ``service.http.openapi``)."""

from __future__ import annotations

import copy
import re
from typing import Any, Final

from litestar.openapi.spec import OpenAPI, OpenAPIMediaType, Reference, Schema
from litestar.openapi.spec.enums import OpenAPIType

from service.documents.walk import PATH_CONTROL_CHARS, STORED_PATH_CONTROL_CHARS
from service.http.jsondepth import MAX_JSON_DEPTH
from service.settings import Settings
from service.text.model_families import ENCODINGS, FAMILIES, VENDORS

_SPACE: Final = r"\t\n\x0b\x0c\r\x1c-\x20\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
"""Exactly the characters ``str.isspace`` (and so ``str.strip``) treats as whitespace: regex engines'
``\\s`` differ on some (``\x1c``-``\x1f``)."""
NOT_BLANK: Final = rf"^[^\x00]*[^\x00{_SPACE}][^\x00]*$"
"""Some character that is not whitespace, and no NUL anywhere (PostgreSQL text cannot hold NUL)."""
NO_NUL: Final = r"^[^\x00]*$"


def speaker_pattern(refused: str) -> str:
    """A name on one line: none of ``refused`` (a character class's body), and some character that is
    not whitespace. The lookahead changes nothing for JSON Schema's regexes; Python's ``$`` would also
    take a final newline."""
    return rf"^(?!.*\n)[^{refused}]*[^{refused}{_SPACE}][^{refused}]*$"


def _limits(settings: Settings) -> dict[tuple[str, str], dict[str, Any]]:
    """(component, property) -> constraints that validation enforces with this deployment's settings."""
    # Imported here: these feature modules import ``errors`` from this one.
    from service.assembly.feedback import MAX_FEEDBACK_ITEMS
    from service.conversations.checks import SPEAKER_REFUSED_IN_SCHEMA
    from service.memories.types import RESERVED_KINDS
    from service.memories.validation import MAX_EMBEDDING_VALUE, MIN_EMBEDDING_COMPONENT, OCCURRED_PATTERN

    lim, docs, asm = settings.limits, settings.documents, settings.assembly
    text = _text(lim.max_text_chars, NOT_BLANK)
    query = _text(settings.retrieval.max_query_chars, NOT_BLANK)
    dim = settings.embedding.dim
    kind = {"schema_not": Schema(enum=list(RESERVED_KINDS))}  # written only through /v1/documents, /v1/conversations
    return {
        ("MemoryIn", "text"): text,
        ("MemoryPatch", "text"): text,
        ("MemoryIn", "kind"): kind,
        ("MemoryPatch", "kind"): kind,
        ("MemoryIn", "occurred_at"): {"pattern": OCCURRED_PATTERN},
        ("MemoryPatch", "occurred_at"): {"pattern": OCCURRED_PATTERN},
        ("MemoryIn", "expires_at"): {"pattern": OCCURRED_PATTERN},
        ("MemoryPatch", "expires_at"): {"pattern": OCCURRED_PATTERN},
        ("MemoryIn", "valid_until"): {"pattern": OCCURRED_PATTERN},
        ("MemoryPatch", "valid_until"): {"pattern": OCCURRED_PATTERN},
        ("MemoryIn", "search_context"): _text(lim.max_text_chars, NO_NUL),
        ("MemoryPatch", "search_context"): _text(lim.max_text_chars, NO_NUL),
        ("MemoryIn", "embedding"): {"min_items": dim, "max_items": dim, "items": Schema(
            type=OpenAPIType.NUMBER, minimum=-MAX_EMBEDDING_VALUE, maximum=MAX_EMBEDDING_VALUE), "contains": Schema(
            any_of=[Schema(minimum=MIN_EMBEDDING_COMPONENT), Schema(maximum=-MIN_EMBEDDING_COMPONENT)])},
        ("MemoryBatchIn", "memories"): {"min_items": 1, "max_items": lim.max_batch},
        ("DirectiveIn", "content"): _text(lim.max_directive_chars, NOT_BLANK),
        ("SearchRequest", "query"): query,
        ("SearchRequest", "limit"): {"maximum": lim.max_page_size},
        ("SearchRequest", "modes"): {"min_items": 1},
        ("SearchFilters", "kinds"): {"min_items": 1},
        ("SearchFilters", "levels"): {"min_items": 1},
        ("SearchFilters", "source_prefix"): {"pattern": NO_NUL},
        ("AssembleRequest", "query"): query,
        ("AssembleRequest", "model"): {"pattern": model_pattern()},
        ("AssembleRequest", "recent_messages"): {"max_items": asm.max_messages},
        ("AssembleRequest", "max_context_tokens"): {"maximum": asm.max_context_tokens},
        ("AssembleRequest", "reserve_tokens"): {"maximum": asm.max_context_tokens},
        ("Message", "content"): _text(asm.max_message_chars, NO_NUL),
        ("Message", "role"): {"pattern": NO_NUL},
        ("FeedbackIn", "items"): {"min_items": 1, "max_items": MAX_FEEDBACK_ITEMS},
        ("FeedbackIn", "memory_ids"): {"min_items": 1, "max_items": MAX_FEEDBACK_ITEMS},
        ("IngestRequest", "files"): {"min_items": 1, "max_items": docs.max_files_per_request},
        ("FileIn", "path"): _text(docs.max_path_chars, DOCUMENT_PATH),
        ("FileIn", "content"): {"pattern": NO_NUL},
        ("AppendIn", "messages"): {"min_items": 1, "max_items": lim.max_batch},
        ("MessageIn", "content"): text,
        ("MessageIn", "speaker"): {"pattern": speaker_pattern(SPEAKER_REFUSED_IN_SCHEMA)},
        ("MessageIn", "occurred_at"): {"pattern": OCCURRED_PATTERN},
    }


def _text(max_length: int, pattern: str) -> dict[str, Any]:
    """A pattern and a length limit; the limit in an ``allOf`` of its own, which means the same and lets
    a generator (schemathesis) draw matching strings ~5x faster than from both side by side."""
    return {"pattern": pattern, "all_of": [Schema(max_length=max_length)]}


def _parameters(settings: Settings) -> dict[tuple[str, str], dict[str, Any]]:
    """(path, parameter) -> constraints of path, query and header parameters checked in code."""
    from service.documents.handlers import MAX_DELETE_PATHS
    from service.memories.idempotency import KEY_MAX as IDEMPOTENCY_KEY_MAX
    from service.memories.types import AGENT_ID_MAX_LENGTH, AGENT_ID_PATTERN
    from service.retrieval.types import CONVERSATION_ID_MAX_LENGTH, CONVERSATION_ID_PATTERN

    agent = {"min_length": 1, "max_length": AGENT_ID_MAX_LENGTH, "pattern": AGENT_ID_PATTERN}
    conversation = {"min_length": 1, "max_length": CONVERSATION_ID_MAX_LENGTH, "pattern": CONVERSATION_ID_PATTERN}
    page = {"maximum": settings.limits.max_page_size}
    path = Schema(type=OpenAPIType.STRING, pattern=STORED_DOCUMENT_PATH,  # a deletion's: any stored one
                  all_of=[Schema(max_length=settings.documents.max_path_chars)])
    deadline = {"replace": Schema(type=OpenAPIType.NUMBER)}
    return {
        ("/v1/memories", "limit"): {"maximum": settings.limits.max_page_size},
        ("/v1/memories", "cursor"): {"format": "pgcontext-memories-cursor", "description": MEMORIES_CURSOR},
        **{("/v1/memories", name): {"format": "date-time"} for name in (
            "created_after", "created_before", "occurred_after", "occurred_before", "as_of")},
        ("/v1/memories", "Idempotency-Key"): {"min_length": 1, "max_length": IDEMPOTENCY_KEY_MAX},
        ("/v1/conversations/{conversation_id}/messages", "Idempotency-Key"): {
            "min_length": 1, "max_length": IDEMPOTENCY_KEY_MAX},
        ("/v1/memories/feedback", "Idempotency-Key"): {"min_length": 1, "max_length": IDEMPOTENCY_KEY_MAX},
        ("/v1/conversations/{conversation_id}", "Idempotency-Key"): {
            "min_length": 1, "max_length": IDEMPOTENCY_KEY_MAX},
        ("/v1/memories/{memory_id}", "memory_id"): {"format": "uuid"},
        ("/v1/memories/{memory_id}/history", "memory_id"): {"format": "uuid"},
        ("/v1/memories/{memory_id}/history", "limit"): {"maximum": settings.limits.max_page_size},
        ("/v1/memories/{memory_id}/history", "cursor"): {"format": "pgcontext-history-cursor",
                                                         "description": HISTORY_CURSOR},
        ("/v1/memories/{memory_id}/history/{event_id}/undo", "memory_id"): {"format": "uuid"},
        ("/v1/memories/{memory_id}/history/{event_id}/undo", "event_id"): {"format": "uuid"},
        ("/v1/agents/{agent_id}/directive", "agent_id"): agent,
        ("/v1/documents", "limit"): {"maximum": settings.documents.max_list_page},
        ("/v1/documents", "cursor"): {"format": "pgcontext-documents-cursor", "description": DOCUMENTS_CURSOR},
        ("/v1/documents", "path_prefix"): {"pattern": NO_NUL},
        ("/v1/documents", "path"): {"min_items": 1, "max_items": MAX_DELETE_PATHS, "items": path},
        ("/v1/conversations", "limit"): page,
        ("/v1/conversations", "cursor"): {"format": "pgcontext-conversations-cursor",
                                          "description": CONVERSATIONS_CURSOR},
        ("/v1/conversations/{conversation_id}", "conversation_id"): conversation,
        ("/v1/conversations/{conversation_id}/messages", "conversation_id"): conversation,
        ("/v1/conversations/{conversation_id}/messages", "limit"): page,
        ("/v1/conversations/{conversation_id}/messages", "cursor"): {"format": "pgcontext-messages-cursor",
                                                                      "description": MESSAGES_CURSOR},
        ("/v1/context/assemble", "X-Deadline-Ms"): deadline,
        ("/v1/context/assemble", "X-Timeout-Ms"): deadline,
    }


MEMORIES_CURSOR: Final = ("`next_cursor` of the previous page: base64url (unpadded) of `<created_at, RFC 3339>|<id>`, "
                          "the position after which the page starts.")
HISTORY_CURSOR: Final = ("`next_cursor` of the previous page: base64url (unpadded) of the 16 bytes of the last "
                         "event's id.")
DOCUMENTS_CURSOR: Final = ("`next_cursor` of the previous page: base64url (unpadded) of the JSON list "
                           "`[collection, path]`, the position after which the page starts.")
CONVERSATIONS_CURSOR: Final = ("`next_cursor` of the previous page: base64url (unpadded) of "
                               "`<created_at, RFC 3339>|<conversation id>`, the position after which the page starts.")
MESSAGES_CURSOR: Final = ("`next_cursor` of the previous page: base64url (unpadded) of the position (decimal) after "
                          "which the page starts.")
def _document_path(control: str) -> str:
    """Relative posix segments, none empty, ``.`` or ``..``; no backslash nor a character of ``control`` (a
    schema regex's class: escapes, not the characters)."""
    segment = (rf"(?:[^/\\.{control}][^/\\{control}]*|\.[^/\\.{control}][^/\\{control}]*"
               rf"|\.\.[^/\\{control}]+)")
    return rf"^{segment}(?:/{segment})*$"


def _escaped(characters: str) -> str:
    """A regular expression class's characters as ``\\uXXXX`` escapes (its ranges' ``-`` kept)."""
    return "".join(c if c == "-" else f"\\u{ord(c):04x}" for c in characters)


DOCUMENT_PATH: Final = _document_path(_escaped(PATH_CONTROL_CHARS))
"""A path a file is ingested under: no control character (C0, C1) or line separator."""
STORED_DOCUMENT_PATH: Final = _document_path(_escaped(STORED_PATH_CONTROL_CHARS))
"""A path a stored document may have (a deletion's): no C0 control or DEL."""


def model_pattern() -> str:
    """What :func:`service.text.model_families.resolve_model` accepts, as a (case-insensitive) regex: an
    encoding name, or after an optional gateway path (``vendor/``), fine-tune (``ft:``) and Bedrock
    vendor (``[region.]vendor.``) a family's prefix followed by nothing, a separator, or (except
    OpenAI's) a digit."""
    def anycase(text: str) -> str:
        return "".join(f"[{c.lower()}{c.upper()}]" if c.isalpha() else re.escape(c) for c in text)

    def alternatives(words: tuple[str, ...]) -> str:
        return "|".join(anycase(word) for word in words)

    openai = alternatives(tuple(p for f in FAMILIES if f.name == "openai" for p in f.prefixes))
    others = alternatives(tuple(p for f in FAMILIES if f.name != "openai" for p in f.prefixes))
    regions, vendors = alternatives(VENDORS[0]), alternatives(VENDORS[1])
    return (rf"^\s*(?:(?:{alternatives(ENCODINGS)})|(?:[\s\S]*/)?(?:{anycase('ft:')})?"
            rf"(?:(?:(?:{regions})\.)?(?:{vendors})\.)?"
            rf"(?:(?:{openai})(?:[-.:_][^/]*)?|(?:{others})(?:[-.:_0-9][^/]*)?))\s*$")


def apply_limits(openapi: OpenAPI, settings: Settings) -> None:
    schemas = openapi.components.schemas or {}
    for (component, prop), constraints in _limits(settings).items():
        target = schemas.get(component)
        if target is None or target.properties is None or prop not in target.properties:
            raise RuntimeError(f"the schema has no {component}.{prop} to state its limits on")
        constrain(target.properties[prop], constraints)
    found = set()
    limits = _parameters(settings)
    for path, item in (openapi.paths or {}).items():
        for method in ("get", "put", "post", "patch", "delete"):
            operation = getattr(item, method)
            for parameter in (operation.parameters if operation else None) or []:
                if isinstance(parameter, Reference):
                    continue
                wanted = limits.get((path, parameter.name))
                if wanted is not None and isinstance(parameter.schema, Schema):
                    if "replace" in wanted:
                        parameter.schema = wanted["replace"]
                    constrain(parameter.schema, {k: v for k, v in wanted.items()
                                                  if k not in ("description", "replace")})
                    parameter.description = wanted.get("description", parameter.description)
                    found.add((path, parameter.name))
    if missing := set(limits) - found:
        raise RuntimeError(f"the schema has no parameters {sorted(missing)} to state their limits on")


def constrain(schema: Schema | Reference, constraints: dict[str, Any]) -> None:
    """Set ``constraints`` on ``schema``, or on its non-null alternative(s) when it is nullable."""
    if isinstance(schema, Reference):
        raise RuntimeError(f"cannot constrain a reference ({schema.ref})")
    alternatives = [s for s in (schema.one_of or schema.any_of or []) if isinstance(s, Schema)
                    and s.type != OpenAPIType.NULL]
    if alternatives:  # Litestar sets a nullable value's limits beside its oneOf: move them in
        for name in ("max_length", "min_length", "pattern", "minimum", "maximum"):
            for alternative in alternatives:
                if getattr(schema, name) is not None and getattr(alternative, name) is None:
                    setattr(alternative, name, getattr(schema, name))
            setattr(schema, name, None)
    for target in alternatives or [schema]:
        for name, value in constraints.items():
            if name in ("maximum", "minimum"):
                value = float(value)
            setattr(target, name, copy.copy(value))


def apply_rules(openapi: OpenAPI, settings: Settings) -> None:
    """Rules across fields and inside free-form JSON, checked in code, stated in the schema."""
    from service.documents.ingest import RESERVED_METADATA

    schemas = openapi.components.schemas = dict(openapi.components.schemas or {})
    null = Schema(type=OpenAPIType.NULL)
    no_nul = Schema(type=OpenAPIType.STRING, pattern=NO_NUL)
    value = Reference(ref="#/components/schemas/JsonValue")
    schemas["JsonValue"] = Schema(
        description="Any JSON value whose strings and keys hold no NUL character.",
        one_of=[null, Schema(type=OpenAPIType.BOOLEAN), Schema(type=OpenAPIType.NUMBER), no_nul,
                Schema(type=OpenAPIType.ARRAY, items=value),
                Schema(type=OpenAPIType.OBJECT, property_names=no_nul, additional_properties=value)])

    def metadata(reserved: tuple[str, ...] = ()) -> Schema:
        names = Schema(type=OpenAPIType.STRING, pattern=NO_NUL,
                       schema_not=Schema(enum=list(reserved)) if reserved else None)
        return Schema(type=OpenAPIType.OBJECT, property_names=names, additional_properties=value, description=(
            f"A JSON object: at most {settings.limits.max_metadata_bytes:,} bytes encoded (else 413), nested at most "
            f"{MAX_JSON_DEPTH} levels with the body, no NUL in any key or string"
            + (f"; reserved keys: {', '.join(reserved)}" if reserved else "") + "."))

    for component, prop, reserved in (("MemoryIn", "metadata", ()), ("MemoryPatch", "metadata", ()),
                                      ("SearchFilters", "metadata", ()), ("FileIn", "metadata", RESERVED_METADATA),
                                      ("MessageIn", "metadata", ())):
        current = schemas[component].properties[prop]  # type: ignore[index]
        nullable = isinstance(current, Schema) and any(
            isinstance(s, Schema) and s.type == OpenAPIType.NULL for s in current.one_of or [])
        schemas[component].properties[prop] = (  # type: ignore[index]
            Schema(one_of=[metadata(reserved), null]) if nullable else metadata(reserved))

    # Feedback comes in one of two forms.
    schemas["FeedbackIn"].one_of = [
        Schema(required=["items"], properties={"items": Schema(type=OpenAPIType.ARRAY), "memory_ids": null,
                                                "helpful": null}),
        Schema(required=["memory_ids", "helpful"], properties={
            "memory_ids": Schema(type=OpenAPIType.ARRAY), "helpful": Schema(type=OpenAPIType.BOOLEAN),
            "items": null}),
    ]
    # ``modes`` fuses the named modes itself: with it, ``strategy`` stays ``auto``.
    schemas["SearchRequest"].schema_if = Schema(required=["modes"], properties={"modes": Schema(schema_not=null)})
    schemas["SearchRequest"].then = Schema(properties={"strategy": Schema(const="auto")})
    # An assembly needs a window or selective mode, and its agent scopes the search (no filters.agent_id).
    schemas["AssembleRequest"].any_of = [
        Schema(required=["max_context_tokens"], properties={"max_context_tokens": Schema(type=OpenAPIType.INTEGER)}),
        Schema(required=["selective"], properties={"selective": Schema(const=True)}),
    ]
    filters = copy.deepcopy(schemas["SearchFilters"])
    filters.title = "AssembleFilters"
    filters.properties["agent_id"] = null  # type: ignore[index]
    schemas["AssembleFilters"] = filters
    schemas["RetrievalOptions"].properties["filters"] = Reference(  # type: ignore[index]
        ref="#/components/schemas/AssembleFilters")
    # The list filter ``metadata`` is JSON text: described as such, clients send an object as JSON.
    for parameter in (openapi.paths or {})["/v1/memories"].get.parameters or []:  # type: ignore[union-attr]
        if not isinstance(parameter, Reference) and parameter.name == "metadata":
            parameter.schema = None
            parameter.content = {"application/json": OpenAPIMediaType(schema=metadata())}
