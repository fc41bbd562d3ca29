"""What a request takes from its org's rate-limit bucket: a price that follows the work it causes,
computed before that work runs (from the route, ``Content-Length`` and the already-decoded body).

One token is about what a light request costs the service (~1-1.5 ms of CPU, measured on 2
cores: a cached hot set 1.3 ms, a refusal 1.5 ms before refusals were answered at the edge).
What grows with a request, measured the same way (service + Postgres + Redis CPU per request):

* **the embedder**: a search's query embedding grows with its length up to the model's cut (256
  word pieces, ~1,000 characters): a short query ~2 ms, 1,000 or 4,000 characters ~37 ms. Charged
  ``embed_chars_per_token`` (one token per 40 characters, counted up to ``embed_max_chars``) for
  every strategy that embeds the query (all but ``lexical``);
* **the query's terms**: matching and scoring grow with the query however long it is (an assembly
  with a 4,000-character lexical query 20 ms against 6 ms for a short one): one token per
  ``text_chars_per_token`` characters of every search's and assembly's query; memory writes (and
  conversation appends) pay the same rate for the texts the service embeds for them (the bulk lane
  runs at a lower priority and yields to queries, so its characters are priced like matching, not
  like a query's embedding);
* **the body**: long histories, big filters and uploads are read, decoded and counted: one token
  per ``body_bytes_per_token`` bytes read. ``Content-Length`` gives a first price before the body is
  read; the bytes actually read set the price (a chunked body announces no length), and a body
  whose price passes what the org can pay is refused while it arrives
  (:meth:`service.tenancy.ratelimit.RateLimiter.metered`);
* **a hot-set miss**: ``GET /v1/memories/hot`` for an agent whose set is not cached reads Postgres
  (2.3 ms against 1.3 ms from Redis): ``hot_miss_cost`` more, taken after the read (it is known
  only then), which may leave the bucket below zero so the org's next requests wait for it.

A price is never more than the bucket (``burst``): a request the bucket could never pay would be
refused forever, so the largest requests cost a full bucket.
"""

from __future__ import annotations

from typing import Any, Final

from service.settings import RateLimitSettings

HEAVY_ROUTES: Final[frozenset[tuple[str, str]]] = frozenset({
    ("POST", "/v1/context/assemble"),
    ("POST", "/v1/memories/search"),
    ("POST", "/v1/memories"),
    ("PATCH", "/v1/memories/{memory_id}"),
    ("POST", "/v1/documents"),
    ("POST", "/v1/conversations/{conversation_id}/messages"),
    ("GET", "/v1/export"),
    ("POST", "/v1/import"),
})
"""(method, route template) of requests that embed, search or stream a lot: they cost ``heavy_cost``."""

SEARCH: Final = ("POST", "/v1/memories/search")
ASSEMBLE: Final = ("POST", "/v1/context/assemble")
CREATE: Final = ("POST", "/v1/memories")
PATCH: Final = ("PATCH", "/v1/memories/{memory_id}")
APPEND: Final = ("POST", "/v1/conversations/{conversation_id}/messages")


def base_cost(s: RateLimitSettings, method: str, route: str, body_bytes: int) -> int:
    """The price known before the body is read: the route's, plus the body's size."""
    cost = s.heavy_cost if (method, route) in HEAVY_ROUTES else 1
    if s.body_bytes_per_token > 0:
        cost += max(0, body_bytes) // s.body_bytes_per_token
    return min(cost, s.burst)


def work_cost(s: RateLimitSettings, method: str, route: str, body: Any) -> int:
    """The extra price of what the decoded JSON ``body`` asks for (0 for anything unexpected: the
    handler's validation answers that, and the base price was taken already)."""
    if not isinstance(body, dict):
        return 0
    key = (method, route)
    if key in (SEARCH, ASSEMBLE):
        query = body.get("query")
        if not isinstance(query, str):
            return 0
        options = body if key == SEARCH else body.get("retrieval")
        strategy = options.get("strategy", "auto") if isinstance(options, dict) else "auto"
        return _text_tokens(s, len(query)) + (_embed_tokens(s, len(query)) if strategy != "lexical" else 0)
    if key == CREATE:
        items = body.get("memories", [body])
        if not isinstance(items, list):
            return 0
        texts = [item["text"] for item in items
                 if isinstance(item, dict) and isinstance(item.get("text"), str) and item.get("embedding") is None]
        return _text_tokens(s, sum(min(len(t), s.embed_max_chars) for t in texts))
    if key == APPEND:
        messages = body.get("messages")
        if not isinstance(messages, list):
            return 0
        contents = [m["content"] for m in messages if isinstance(m, dict) and isinstance(m.get("content"), str)]
        return _text_tokens(s, sum(min(len(c), s.embed_max_chars) for c in contents))
    if key == PATCH and isinstance(body.get("text"), str):
        return _text_tokens(s, min(len(body["text"]), s.embed_max_chars))
    return 0


def _embed_tokens(s: RateLimitSettings, chars: int) -> int:
    return min(chars, s.embed_max_chars) // s.embed_chars_per_token if s.embed_chars_per_token > 0 else 0


def _text_tokens(s: RateLimitSettings, chars: int) -> int:
    return chars // s.text_chars_per_token if s.text_chars_per_token > 0 else 0
