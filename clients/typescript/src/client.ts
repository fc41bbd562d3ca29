/**
 * `Client`: every endpoint of the pgcontext API as a method, the Python client's calls in camelCase.
 * Request fields keep the API's own names (`agent_id`, `max_context_tokens`, ...) and types, taken from
 * the generated schema; per-call options (`idempotencyKey`, `timeoutMs`, `signal`) come last.
 */

import { fromResponse, TransportError } from "./errors.js";
import { ExportReader } from "./export.js";
import { type Call, env, query, type RequestOptions, segment, Transport } from "./http.js";
import { RetryPolicy, type RetryOptions } from "./retry.js";
import type * as t from "./types.js";

export interface ClientOptions {
  /** The service, e.g. `http://127.0.0.1:8080`. Default `$PGCONTEXT_URL`, else `http://127.0.0.1:${PGCONTEXT_PORT ?? 8080}`. */
  url?: string;
  /** An API key of your org. Default `$PGCONTEXT_API_KEY`. */
  apiKey?: string | null;
  /**
   * Local limit on each try (connect, answer, body) in ms; past it the try is a `TransportError`. Default 30000.
   * An export's lines are not limited by it, only its answer's start (the service may take up to 60 s a read).
   */
  timeoutMs?: number;
  /** Retries of 429/503 answers (and broken connections of repeatable calls). `{ attempts: 1 }` turns them off. */
  retry?: RetryPolicy | RetryOptions;
  /** The fetch to use (default the global one): for proxies, instrumentation or tests. */
  fetch?: typeof fetch;
  /** Extra headers on every request. */
  headers?: Record<string, string>;
}

/** Fields of a memory besides its text (`createMemory`). */
export type MemoryFields = Omit<t.MemoryIn, "text">;
/** `search` options: everything of the search request besides the query. */
export type SearchOptions = Omit<t.SearchRequest, "query">;
/** `assemble` options: the request's fields besides agent and query; `model` defaults to `gpt-4o`. */
export type AssembleOptions = Omit<t.AssembleRequest, "agent_id" | "query" | "model"> & { model?: string };
/** Feedback: `{ [memoryId]: helpful }`, a `Map` of the same, or a list of `{ id, helpful }`. */
export type Feedback = Record<string, boolean> | ReadonlyMap<string, boolean> | readonly t.FeedbackItem[];

function defaultUrl(vars: Record<string, string | undefined>): string {
  return vars.PGCONTEXT_URL || `http://127.0.0.1:${vars.PGCONTEXT_PORT || "8080"}`;
}

export class Client {
  readonly url: string;
  readonly retry: RetryPolicy;
  private readonly transport: Transport;

  constructor(options: ClientOptions = {}) {
    const vars = env();
    this.url = (options.url ?? defaultUrl(vars)).replace(/\/+$/, "");
    this.retry = options.retry instanceof RetryPolicy ? options.retry : new RetryPolicy(options.retry);
    this.transport = new Transport({
      url: this.url,
      apiKey: options.apiKey !== undefined ? options.apiKey : vars.PGCONTEXT_API_KEY ?? null,
      timeoutMs: options.timeoutMs ?? 30_000,
      retry: this.retry,
      fetch: options.fetch ?? globalThis.fetch.bind(globalThis),
      headers: options.headers ?? {},
    });
  }

  private call<T>(call: Call): Promise<T> {
    return this.transport.json<T>(call);
  }

  // --- memories ---------------------------------------------------------------------------------

  /** Store one memory (embedded server-side unless `embedding` is given); its id is in `ids`. */
  createMemory(text: string, fields: MemoryFields = {}, options?: RequestOptions): Promise<t.CreatedMemories> {
    return this.call({ method: "POST", path: "/v1/memories", body: { ...fields, text }, repeatable: true, options });
  }

  /** Store a batch (at most the service's `PGCONTEXT_MAX_BATCH`, default 256) in one transaction. */
  createMemories(memories: readonly t.MemoryIn[], options?: RequestOptions): Promise<t.CreatedMemories> {
    return this.call({ method: "POST", path: "/v1/memories", body: { memories }, repeatable: true, options });
  }

  /** One memory by id (`NotFound` when it is not your org's). */
  getMemory(memoryId: string, options?: RequestOptions): Promise<t.Memory> {
    return this.call({ method: "GET", path: `/v1/memories/${segment(memoryId)}`, repeatable: true, options });
  }

  /** A page of memories, newest first; pass `next_cursor` back as `cursor` for the next page. */
  listMemories(filters: t.ListMemoriesQuery = {}, options?: RequestOptions): Promise<t.MemoryPage> {
    return this.call({ method: "GET", path: "/v1/memories", query: query(filters), repeatable: true, options });
  }

  /** Change only the fields given (re-embeds when `text` changes); returns the memory as stored and what happened. */
  updateMemory(memoryId: string, patch: t.MemoryPatch, options?: RequestOptions): Promise<t.PatchedMemory> {
    return this.call({
      method: "PATCH", path: `/v1/memories/${segment(memoryId)}`, body: patch, repeatable: true, options,
    });
  }

  /** Delete one memory (`NotFound` when there is none); `erase: true` removes its history too. */
  deleteMemory(memoryId: string, fields: { erase?: boolean } = {}, options?: RequestOptions): Promise<void> {
    return this.call({
      method: "DELETE", path: `/v1/memories/${segment(memoryId)}`, query: query(fields), repeatable: true, options,
    });
  }

  /** Every change to a memory, oldest first (append-only events); pass `next_cursor` back as `cursor`. */
  memoryHistory(memoryId: string, page: { limit?: number; cursor?: string } = {}, options?: RequestOptions
  ): Promise<t.HistoryPage> {
    return this.call({
      method: "GET", path: `/v1/memories/${segment(memoryId)}/history`, query: query(page), repeatable: true, options,
    });
  }

  /** Undo a merge (the duplicate comes back as a memory of its own) or a model's decision. */
  undoEvent(memoryId: string, eventId: string, fields: { reason?: string } = {}, options?: RequestOptions
  ): Promise<t.UndoResult> {
    // Not repeatable on a broken connection: an event is undone once, so a resent undo that had
    // succeeded would answer 409 `already_undone`.
    return this.call({
      method: "POST", path: `/v1/memories/${segment(memoryId)}/history/${segment(eventId)}/undo`, body: fields,
      repeatable: false, options,
    });
  }

  /** The org's defaults (`on_duplicate`). */
  orgSettings(options?: RequestOptions): Promise<t.OrgSettings> {
    return this.call({ method: "GET", path: "/v1/org/settings", repeatable: true, options });
  }

  /** Change the org's defaults: `on_duplicate` = `merge`, `keep` or `reject`. */
  setOrgSettings(fields: t.OrgSettingsIn, options?: RequestOptions): Promise<t.OrgSettings> {
    return this.call({ method: "PATCH", path: "/v1/org/settings", body: fields, repeatable: true, options });
  }

  /** Data-subject erasure: delete every memory of `agentId` in your org (idempotent). */
  eraseAgent(agentId: string, options?: RequestOptions): Promise<t.DeletedAgentMemories> {
    return this.call({
      method: "DELETE", path: "/v1/memories", query: query({ agent_id: agentId }), repeatable: true, options,
    });
  }

  /** The agent's hot set: pinned, most important and most recently used memories. */
  hotSet(agentId: string, options?: RequestOptions): Promise<t.HotSet> {
    return this.call({
      method: "GET", path: "/v1/memories/hot", query: query({ agent_id: agentId }), repeatable: true, options,
    });
  }

  /**
   * Report which memories helped (`{ [id]: true/false }` or `{ id, helpful }` items); moves their usefulness.
   * The call's `Idempotency-Key` makes its retries safe: a retry of a report that was counted answers the
   * first report's result and moves nothing again.
   */
  feedback(helpful: Feedback, options?: RequestOptions): Promise<t.FeedbackOut> {
    const items: t.FeedbackItem[] = Array.isArray(helpful) ? [...(helpful as readonly t.FeedbackItem[])]
      : [...(helpful instanceof Map ? helpful : Object.entries(helpful))].map(([id, ok]) => ({ id, helpful: ok }));
    // Repeatable: the service replays a report whose Idempotency-Key it already holds.
    return this.call({ method: "POST", path: "/v1/memories/feedback", body: { items }, repeatable: true, options });
  }

  /** Hybrid retrieval over memories and document chunks; each result shows its lexical and semantic ranks. */
  search(text: string, fields: SearchOptions = {}, options?: RequestOptions): Promise<t.SearchResponse> {
    return this.call({
      method: "POST", path: "/v1/memories/search", body: { ...fields, query: text }, repeatable: true, options,
    });
  }

  // --- context assembly -------------------------------------------------------------------------

  /**
   * The context for one model call: directive, hot and cold memories and history, packed into a token
   * budget. Give `max_context_tokens`, `selective: true` or both. `options.timeoutMs` is your deadline
   * (`X-Timeout-Ms`), both ways: longer than the service's deadline (40 ms by default) it lengthens the
   * service's wall, up to its `PGCONTEXT_ASSEMBLY_MAX_DEADLINE_MS` (1,000 by default), so the full
   * planned retrieval runs when you can wait for it; past it the service answers 504
   * (`DeadlineExceeded`), never a partial context. `degradation_reasons` lists what the context lacks
   * of what was planned (`directive_missing`, ...; empty: complete).
   */
  assemble(agentId: string, text: string, fields: AssembleOptions = {}, options?: RequestOptions
  ): Promise<t.AssembledContext> {
    const body = { ...fields, model: fields.model ?? "gpt-4o", agent_id: agentId, query: text };
    return this.call({ method: "POST", path: "/v1/context/assemble", body, repeatable: true, options });
  }

  // --- conversations ----------------------------------------------------------------------------

  /**
   * Append messages to a conversation, in order (the first append creates it, owned by `fields.agent_id`;
   * left out: org-wide). Each is searchable as a memory of kind `message`; one whose `message_id` is
   * already in the conversation is not written again. The call's `Idempotency-Key` makes its retries
   * safe: a retry of an append that was written answers the first append's result and writes nothing.
   */
  appendMessages(conversationId: string, messages: readonly t.MessageIn[],
                 fields: Omit<t.AppendRequest, "messages"> = {}, options?: RequestOptions): Promise<t.Appended> {
    // Repeatable: the service replays an append whose Idempotency-Key it already holds.
    return this.call({
      method: "POST", path: `/v1/conversations/${segment(conversationId)}/messages`,
      body: { ...fields, messages }, repeatable: true, options,
    });
  }

  /** A page of the conversation's messages in order; pass `next_cursor` back as `cursor`. */
  listMessages(conversationId: string, filters: t.ListMessagesQuery = {}, options?: RequestOptions
  ): Promise<t.MessagePage> {
    return this.call({
      method: "GET", path: `/v1/conversations/${segment(conversationId)}/messages`, query: query(filters),
      repeatable: true, options,
    });
  }

  /** One conversation: its agent and message count (`NotFound` when it is not your org's). */
  getConversation(conversationId: string, options?: RequestOptions): Promise<t.Conversation> {
    return this.call({ method: "GET", path: `/v1/conversations/${segment(conversationId)}`, repeatable: true, options });
  }

  /** A page of conversations, newest first (`agent_id`: only that agent's). */
  listConversations(filters: t.ListConversationsQuery = {}, options?: RequestOptions): Promise<t.ConversationPage> {
    return this.call({ method: "GET", path: "/v1/conversations", query: query(filters), repeatable: true, options });
  }

  /**
   * Delete a conversation and everything derived from its messages (`NotFound` when there is none).
   * `agent_id`: only if the conversation is that agent's (else `Conflict` with `code`
   * `conversation_agent_mismatch` and the owner in `details.agent_id`, nothing removed); left out: whoever
   * owns it. `deleteConversation(id, options)` (request options only) is still taken.
   */
  deleteConversation(conversationId: string, options?: RequestOptions): Promise<t.DeletedConversation>;
  deleteConversation(conversationId: string, filters: t.DeleteConversationQuery, options?: RequestOptions
  ): Promise<t.DeletedConversation>;
  deleteConversation(conversationId: string, filtersOrOptions: t.DeleteConversationQuery | RequestOptions = {},
    options?: RequestOptions): Promise<t.DeletedConversation> {
    // the second argument is the filters when options follow it or it names the agent
    const filters = options !== undefined || "agent_id" in filtersOrOptions;
    return this.call({
      method: "DELETE", path: `/v1/conversations/${segment(conversationId)}`,
      query: query(filters ? filtersOrOptions as t.DeleteConversationQuery : {}), repeatable: true,
      options: filters ? options : filtersOrOptions as RequestOptions,
    });
  }

  /**
   * Remove the conversation's messages at `fromPosition` and after (`NotFound` when there is no such
   * conversation). `message_count`: only if it holds exactly that many (else `Conflict` with `code`
   * `conversation_changed`, nothing removed): pass the count you read to remove nothing appended since;
   * `last_id`: only while that message (its `id`) is the last one; `agent_id`: only if the conversation is
   * that agent's (else `Conflict` with `code` `conversation_agent_mismatch`). Its `Idempotency-Key` makes a
   * retry safe.
   */
  truncateConversation(conversationId: string, fromPosition: number,
    opts: t.TruncateConversationQuery = {}, options?: RequestOptions
  ): Promise<t.TruncatedConversation> {
    return this.call({
      method: "DELETE", path: `/v1/conversations/${segment(conversationId)}/messages`,
      query: query({ from_position: fromPosition, ...opts }), repeatable: true, options,
    });
  }

  // --- directives -------------------------------------------------------------------------------

  /** Create or replace the agent's directive (its standing instructions); the version increments. */
  putDirective(agentId: string, content: string, options?: RequestOptions): Promise<t.Directive> {
    return this.call({
      method: "PUT", path: `/v1/agents/${segment(agentId)}/directive`, body: { content }, repeatable: true, options,
    });
  }

  /** The agent's directive (`NotFound` when it has none). */
  getDirective(agentId: string, options?: RequestOptions): Promise<t.Directive> {
    return this.call({ method: "GET", path: `/v1/agents/${segment(agentId)}/directive`, repeatable: true, options });
  }

  /** Delete the agent's directive (`NotFound` when it has none). */
  deleteDirective(agentId: string, options?: RequestOptions): Promise<void> {
    return this.call({ method: "DELETE", path: `/v1/agents/${segment(agentId)}/directive`, repeatable: true, options });
  }

  // --- documents --------------------------------------------------------------------------------

  /** Ingest files as line-anchored chunks; unchanged files are skipped, changed ones replaced. */
  ingestDocuments(files: readonly t.FileIn[], fields: Omit<t.IngestRequest, "files"> = {}, options?: RequestOptions
  ): Promise<t.IngestResponse> {
    // Repeatable: the service skips a file whose content hash it already holds.
    return this.call({ method: "POST", path: "/v1/documents", body: { ...fields, files }, repeatable: true, options });
  }

  /** Ingested files (with content hashes, so you can send only what changed). */
  listDocuments(filters: t.ListDocumentsQuery = {}, options?: RequestOptions): Promise<t.DocumentPage> {
    return this.call({ method: "GET", path: "/v1/documents", query: query(filters), repeatable: true, options });
  }

  /** Remove files and their chunks from a collection (`NotFound` when none of the paths exists). */
  deleteDocuments(paths: readonly string[], fields: { collection?: string } = {}, options?: RequestOptions
  ): Promise<t.DeletedDocuments> {
    return this.call({
      method: "DELETE", path: "/v1/documents", query: query({ path: paths, collection: fields.collection }),
      repeatable: true, options,
    });
  }

  /** The document index: revision, counts per level and language, semantic availability, dirty paths. */
  documentsIndex(options?: RequestOptions): Promise<t.IndexSummary> {
    return this.call({ method: "GET", path: "/v1/documents/index", repeatable: true, options });
  }

  // --- health and export ------------------------------------------------------------------------

  /**
   * Import lines of an export (`export()`) into your org: memories with their history and supersession,
   * directives. Ids are kept, so a retry writes nothing twice; send a long export in several calls
   * (at most PGCONTEXT_MAX_BATCH memories each).
   */
  importLines(lines: readonly t.ExportLine[], options?: RequestOptions): Promise<t.ImportResult> {
    return this.call({ method: "POST", path: "/v1/import", body: { lines }, repeatable: true, options });
  }

  /** `/healthz`: the process is up. */
  health(options?: RequestOptions): Promise<t.Health> {
    return this.call({ method: "GET", path: "/healthz", repeatable: true, options });
  }

  /** `/readyz`: Postgres and Redis answer (`status` is `unavailable` otherwise; never thrown). */
  ready(options?: RequestOptions): Promise<t.Health> {
    return this.call({ method: "GET", path: "/readyz", repeatable: true, accept: [503], options });
  }

  /**
   * Data-subject export: every line of the agent's NDJSON export as an object (`type` says which kind),
   * streamed; the last is `{ type: "end", ... }`. Without `agentId` (`undefined`), the whole org's.
   * An export that stopped before its end line throws `IncompleteExport` once the lines that came are
   * read (the service's `error` line, or a stream cut short); one whose connection broke, `TransportError`.
   */
  async *export(agentId?: string, options?: RequestOptions): AsyncGenerator<t.ExportLine, void, undefined> {
    const call: Call = { method: "GET", path: "/v1/export", query: query({ agent_id: agentId }), repeatable: true, options };
    const { response, untimed, done } = await this.transport.send(call);
    // The local per-try limit covers the answer's start; a long export then streams as long as it needs
    // (the caller's signal still aborts it).
    untimed();
    try {
      if (!response.ok) throw fromResponse(response, await response.text());
      const lines = new ExportReader(response.headers.get("x-request-id"));
      if (response.body === null) {
        lines.finish();
        return;
      }
      const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffered = "";
      try {
        for (;;) {
          let chunk: ReadableStreamReadResult<string>;
          try {
            chunk = await reader.read();
          } catch (error) {
            if (options?.signal?.aborted) throw options.signal.reason;
            throw new TransportError(`GET /v1/export: the export broke off: ${String(error)}`, error);
          }
          if (chunk.done) break;
          buffered += chunk.value;
          let newline: number;
          while ((newline = buffered.indexOf("\n")) !== -1) {
            const line = lines.line(buffered.slice(0, newline));
            buffered = buffered.slice(newline + 1);
            if (line !== null) yield line;
          }
        }
        const last = lines.line(buffered);
        if (last !== null) yield last;
        lines.finish();
      } finally {
        await reader.cancel().catch(() => undefined);
        reader.releaseLock();
      }
    } finally {
      done();
    }
  }
}
