"""Settings of search: retrieval (BM25, HNSW, the query embedder's circuit), reranking, documents."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from service.settings.env import secret

RerankProvider = Literal["none", "tei", "cohere", "jina"]
RERANK_DEFAULT_API_BASE: dict[str, str] = {"cohere": "https://api.cohere.com/v2", "jina": "https://api.jina.ai/v1"}


@dataclass(frozen=True, slots=True)
class RerankSettings:
    """An optional HTTP cross-encoder that re-orders the fused top-N of every search (off by default)."""

    provider: RerankProvider = "none"
    """``none`` (off); ``tei``: Hugging Face text-embeddings-inference ``POST {api_base}/rerank`` with
    ``{"query", "texts"}`` -> ``[{"index", "score"}]``; ``cohere`` / ``jina``: ``POST {api_base}/rerank``
    with ``{"model", "query", "documents", "top_n"}`` -> ``{"results": [{"index", "relevance_score"}]}``."""
    api_base: str | None = secret("dsn")
    """Base URL (``/rerank`` is appended). Required for ``tei``; defaults to Cohere's and Jina's public APIs."""
    api_key: str | None = secret("value")
    """Bearer token sent as ``Authorization`` (none when unset)."""
    model: str | None = None
    """Model name sent to Cohere/Jina (e.g. ``rerank-v3.5``, ``jina-reranker-v2-base-multilingual``);
    TEI serves one model and ignores it."""
    top_n: int = 20
    """Fused candidates sent to the reranker (at least the request's ``limit``); it re-orders them and
    the best ``limit`` are returned."""
    timeout_ms: int = 300
    """Deadline of one rerank call. Also its time estimate: a search with less time left than this
    (context assembly's cold budget) skips the reranker and keeps the fused order, saying why."""
    max_chars: int = 2000
    """Each candidate's text is cut to this many characters before it is sent (bounds the payload)."""


@dataclass(frozen=True, slots=True)
class RetrievalSettings:
    lexical_timeout_ms: int = 1000
    """Deadline of the lexical branch (asyncio timeout and the transaction's statement_timeout)."""
    semantic_timeout_ms: int = 1000
    """Deadline of the vector query (asyncio timeout and the transaction's statement_timeout)."""
    embedding_timeout_ms: int = 2000
    """Deadline for embedding the query; past it the search falls back to lexical."""
    query_cache_size: int = 1024
    """Query embeddings kept in the in-process LRU, keyed by (org, text), one bound for all orgs (0 disables it)."""
    postings_per_term: int = 500
    """Most postings read per query term, best BM25 impact first: bounds the cost of common words.
    500 keeps hybrid p95 under 15 ms on a 100K-row org at a SciFact lexical nDCG@10 cost of 0.006
    versus 2,000 (docs/retrieval.md)."""
    bm25_k1: float = 0.9
    """BM25 term-frequency saturation (Anserini's default, as the BEIR BM25 baselines use); 0 to 100."""
    bm25_b: float = 0.4
    """BM25 document-length normalisation, 0 to 1 (Anserini's default; short memories such as chat turns
    lose little to length, docs/retrieval.md "Decisions")."""
    search_context_weight: float = 0.25
    """BM25 weight of a memory's ``search_context`` terms against its text's (a term's frequency is
    ``tf + w * ctx_tf``, the length likewise); 0 ignores the context (docs/retrieval.md "Search context")."""
    speaker_key: str = "speaker"
    """Metadata key that names who said or wrote a memory (e.g. ``{"speaker": "Melanie"}`` on a chat
    turn), read by ``speaker_boost`` (docs/retrieval.md "Speakers")."""
    speaker_boost: float = 1.5
    """Standard deviations added in ``auto``'s z-score fusion to a candidate whose speaker the query
    names as a word ("What does Melanie do to relax?"); 0 turns it off. A request may override it
    (``tuning.speaker_boost``)."""
    ef_search: int = 100
    """Default ``hnsw.ef_search`` for the semantic branch (a request may override it)."""
    max_query_chars: int = 4000
    """Longest query accepted."""
    embedder_cooldown_s: float = 5.0
    """After ``embedder_failures_to_open`` consecutive failures of an org's query embeddings, ``auto``
    goes lexical-only for that org for this long instead of waiting again (then one request tries the
    embedder again)."""
    embedder_max_in_flight: int = 2
    """``auto`` goes lexical-only while this many query embeddings are already running or queued
    and recent ones took more than 80% of the embedding deadline (0 = never): then the extra wait
    would only end in a timeout (``retrieval.reason: embedder_busy``)."""
    embedder_failures_to_open: int = 3
    """Consecutive embedder failures that start the cooldown (``retrieval.reason:
    embedder_circuit_open``): errors, or timeouts while the embedder is stalled (see
    ``embedder_stall_ms``; a timeout while embeddings keep completing is load: it falls back for its
    own request only)."""
    embedder_stall_ms: int = 1000
    """A query-embedding timeout counts as an embedder failure only when no query embedding has
    completed for this long while one was in flight: a stuck embedder, not a busy one. Assembly's
    own embedding deadline is a few ms, far shorter than one queue of a burst; judging the embedder
    by it opened the circuit under load (at concurrency 8 and 100K memories, 61% of assemblies ran
    lexical-only because of it)."""
    branch_delay_ms: int = 0
    """Testing knob: ``pg_sleep`` this long inside each branch's transaction (never set in production)."""
    rerank: RerankSettings = field(default_factory=RerankSettings)
    """The optional cross-encoder stage after fusion (``PGCONTEXT_RERANK_*``)."""


@dataclass(frozen=True, slots=True)
class ConversationSettings:
    """Messages appended to conversations (``POST /v1/conversations/{id}/messages``)."""

    context_turns: int = 2
    """Each message's search context (searched lexically, never packed) is derived from the last this
    many turns of its session before it in its conversation (messages without a session make one of
    their own), each as ``speaker: words``; 0: none (docs/retrieval.md "Conversations")."""


@dataclass(frozen=True, slots=True)
class DocumentSettings:
    max_files_per_request: int = 256
    """Most files in one POST /v1/documents (413 above)."""
    max_file_bytes: int = 1_000_000
    """Largest file accepted, in UTF-8 bytes (413 above); the importer skips bigger files as ``too_large``."""
    max_request_file_bytes: int = 6 * 1024 * 1024
    """Most file content in one request, summed over its files (413 above). Keep it under
    ``LimitSettings.max_request_bytes`` (8 MiB), which bounds the whole JSON body."""
    max_path_chars: int = 1024
    """Longest document path."""
    max_chunk_tokens: int = 256
    """L2 chunk size in cl100k_base tokens; the local embedding model reads at most 256 word pieces."""
    max_section_tokens: int = 1024
    """Bound on L0 summary and L1 section texts (a longer section's text is a prefix, flagged ``truncated``)."""
    tokenizer: str = "cl100k_base"
    """tiktoken encoding that measures chunk sizes."""
    max_list_page: int = 1000
    """Largest ``limit`` of GET /v1/documents (rows are small; the importer reads the whole list)."""
    write_timeout_ms: int = 60_000
    """statement_timeout of an ingestion's write transaction (thousands of chunks update HNSW, trigram
    and BM25 postings; the default 5 s tenant timeout is too tight for a full batch on a small machine)."""
