/** Every `Client` method against a live service over real HTTP (the Python client's test, in TypeScript). */

import { randomUUID } from "node:crypto";
import { describe, expect, test, vi } from "vitest";

import {
  Client, Conflict, type ExportLine, IncompleteExport, NotFound, PgcontextError, ValidationError, type Memory,
} from "pgcontext";

import { agent, client, cutting, Recorder, required } from "./live.js";

describe("memories", () => {
  test("create, batch, get, list with cursor and filters, update, search, hot set, feedback, export, delete, erase", async () => {
    const pg = client();
    const who = agent("mem");
    const one = await pg.createMemory("The user prefers dark roast coffee.", {
      agent_id: who, importance: 0.9, metadata: { topic: "coffee" }, occurred_at: "2024-05-01T00:00:00Z",
    });
    const batch = await pg.createMemories([
      { text: "The espresso machine is on the third floor.", agent_id: who },
      { text: "Invoices go out on the first business day.", agent_id: who, kind: "policy", pinned: true },
    ]);
    expect(one.ids).toHaveLength(1);
    expect(batch.ids).toHaveLength(2);
    const [coffee] = one.ids as [string];
    const [espresso, invoices] = batch.ids as [string, string];

    const memory: Memory = await pg.getMemory(coffee);
    expect(memory).toMatchObject({ text: "The user prefers dark roast coffee.", agent_id: who, kind: "fact",
      metadata: { topic: "coffee" } });
    expect(memory.importance).toBeCloseTo(0.9);
    expect(new Date(memory.occurred_at).toISOString()).toBe("2024-05-01T00:00:00.000Z");

    const page = await pg.listMemories({ agent_id: who, limit: 2 });
    expect(page.items).toHaveLength(2);
    expect(page.next_cursor).not.toBeNull();
    const rest = await pg.listMemories({ agent_id: who, limit: 2, cursor: page.next_cursor });
    expect(new Set([...page.items, ...rest.items].map((m) => m.id))).toEqual(new Set([coffee, espresso, invoices]));
    expect((await pg.listMemories({ agent_id: who, metadata: { topic: "coffee" } })).items.map((m) => m.id)).toEqual([coffee]);
    expect((await pg.listMemories({ agent_id: who, kind: "policy" })).items.map((m) => m.id)).toEqual([invoices]);

    const updated = await pg.updateMemory(espresso, { text: "The espresso machine moved to the fourth floor.", importance: 0.7 });
    expect(updated.text).toMatch(/fourth floor\.$/);
    expect(updated.importance).toBeCloseTo(0.7);
    expect(updated.kind).toBe("fact"); // untouched fields stay

    const found = await pg.search("espresso machine floor", { filters: { agent_id: who }, limit: 5 });
    expect(found.results[0]?.id).toBe(espresso);
    expect(["hybrid", "lexical", "semantic", "lexical_first"]).toContain(found.strategy);
    const lexical = await pg.search("espresso", { strategy: "lexical", filters: { agent_id: who } });
    expect(lexical.results[0]).toMatchObject({ lexical_rank: 1, semantic_rank: null });

    const hot = await pg.hotSet(who);
    expect(hot.agent_id).toBe(who);
    expect(hot.items.map((m) => m.id)).toContain(invoices); // pinned

    const unknown = randomUUID();
    const fb = await pg.feedback({ [coffee]: true, [unknown]: false });
    expect(fb.updated.map((u) => u.id)).toEqual([coffee]);
    expect(fb.updated[0]?.usefulness).toBeGreaterThan(0);
    expect(fb.not_found).toHaveLength(1);
    const asItems = await pg.feedback([{ id: espresso, helpful: false }]);
    expect(asItems.updated.map((u) => u.id)).toEqual([espresso]);

    const lines = [];
    for await (const line of pg.export(who)) lines.push(line);
    expect(lines[0]?.type).toBe("export");
    expect(lines.filter((l) => l.type === "memory")).toHaveLength(3);
    const events = lines.filter((l) => l.type === "event").length; // the memories' history
    expect(events).toBeGreaterThanOrEqual(3);
    expect(lines.at(-1)).toEqual(
      { type: "end", counts: { directive: 0, document: 0, conversation: 0, memory: 3, chunk: 0, event: events } });

    await pg.deleteMemory(invoices);
    await expect(pg.getMemory(invoices)).rejects.toBeInstanceOf(NotFound);
    const erased = await pg.eraseAgent(who);
    expect(erased).toEqual({ agent_id: who, deleted: 2 });
    expect((await pg.eraseAgent(who)).deleted).toBe(0);
    expect((await pg.listMemories({ agent_id: who })).items).toEqual([]);
  });
});

describe("directives, assembly, documents, health", () => {
  test("directive versions, assembled context with history, selective budget, delete", async () => {
    const pg = client();
    const who = agent("ctx");
    const first = await pg.putDirective(who, "Answer in one sentence.");
    const second = await pg.putDirective(who, "Answer in one short sentence.");
    expect([first.version, second.version]).toEqual([1, 2]);
    expect((await pg.getDirective(who)).content).toBe("Answer in one short sentence.");
    const { ids } = await pg.createMemories([
      { text: "The user prefers dark roast coffee.", agent_id: who },
      { text: "The user is allergic to oat milk.", agent_id: who },
    ]);

    const ctx = await pg.assemble(who, "what coffee should I order for them?", {
      max_context_tokens: 2000, recent_messages: [{ role: "user", content: "Order me a coffee." }],
      retrieval: { strategy: "lexical" },
    }, { timeoutMs: 30_000 });
    expect(ctx.context).toContain("<directive>");
    expect(ctx.context).toContain("Answer in one short sentence.");
    expect(ctx.context).toContain("dark roast");
    expect(ctx.context).toContain("user: Order me a coffee.");
    expect(Object.values(ctx.refs)).toContain(ids[0]);
    for (const id of Object.values(ctx.refs)) expect(ids).toContain(id);
    expect(ctx.budget.max_context_tokens).toBe(2000);
    expect(ctx.budget.context_tokens).toBeGreaterThan(0);
    expect(["L0", "L1"]).toContain(ctx.degradation_level);
    const used = ctx.memories_used.find((m) => m.id === ids[0]);
    expect(used?.scores.relevance).toBeGreaterThan(0);
    expect(used?.justification).toBeTruthy();

    const selective = await pg.assemble(who, "what coffee?", { selective: true });
    expect(selective.budget.mode).toBe("selective");
    expect(selective.budget.max_context_tokens).toBeNull();

    await pg.deleteDirective(who);
    const missing = await pg.getDirective(who).catch((error: unknown) => error);
    expect(missing).toBeInstanceOf(NotFound);
    expect(missing).toMatchObject({ status: 404, code: "not_found" });
    expect((missing as NotFound).requestId).toBeTruthy();
    await pg.eraseAgent(who);
  });

  test("documents: ingest, re-ingest unchanged, list, index, lookup search, delete", async () => {
    const pg = client();
    const collection = agent("c");
    const files = [
      { path: "pkg/brew.py", content: "def brew(beans):\n    return grind(beans)\n" },
      { path: "README.md", content: "# Brewing\n\nUse dark roast.\n", metadata: { team: "cafe" } },
    ];
    const ingested = await pg.ingestDocuments(files, { collection });
    expect(ingested.created).toBe(2);
    expect(ingested.chunks_written).toBeGreaterThan(0);
    const again = await pg.ingestDocuments(files, { collection });
    expect([again.unchanged, again.chunks_written]).toEqual([2, 0]);

    const listing = await pg.listDocuments({ collection });
    expect(listing.items.map((d) => d.path).sort()).toEqual(["README.md", "pkg/brew.py"]);
    expect((await pg.listDocuments({ collection, path_prefix: "pkg/" })).items.map((d) => d.path)).toEqual(["pkg/brew.py"]);
    const index = await pg.documentsIndex();
    expect(index.files).toBeGreaterThanOrEqual(2);
    expect(Object.keys(index.collections)).toContain(collection);

    const lookup = await pg.search("brew", { modes: ["symbol", "path"], filters: { source_prefix: "pkg/" } });
    expect(lookup.strategy).toBe("modes");
    expect(lookup.results[0]?.path).toBe("pkg/brew.py");

    const removed = await pg.deleteDocuments(["pkg/brew.py", "nope.py"], { collection });
    expect([removed.deleted, removed.missing]).toEqual([["pkg/brew.py"], ["nope.py"]]);
    const gone = await pg.deleteDocuments(["pkg/brew.py"], { collection }).catch((error: unknown) => error);
    expect(gone).toBeInstanceOf(NotFound);
    expect((gone as NotFound).code).toBe("document_not_found");
    await pg.deleteDocuments(["README.md"], { collection });
  });

  test("assembly options: a model left undefined is the default one; conversation history is not packed twice", async () => {
    const recorder = new Recorder();
    const pg = client({ fetch: recorder.fetch });
    const who = agent("opt");
    const chat = agent("conv");
    const config: { model?: string } = {}; // e.g. an app's optional setting, passed through as is
    await pg.createMemory("The user's dog is called Biscuit.", { agent_id: who });
    await pg.appendMessages(chat, [{ content: "My dog is called Biscuit.", role: "user", message_id: "m1" },
      { content: "Noted: Biscuit.", role: "assistant", message_id: "m2" }], { agent_id: who });
    const ctx = await pg.assemble(who, "what is my dog called?", {
      model: config.model, max_context_tokens: 1000, retrieval: { strategy: "lexical" }, conversation_id: chat,
      history_turns: 2, recent_messages: [{ role: "user", content: "My dog is called Biscuit." }],
    });
    expect(JSON.parse(recorder.sent.at(-1)?.body ?? "{}")).toMatchObject({ model: "gpt-4o", conversation_id: chat,
      history_turns: 2 });
    expect(ctx.context).toContain("Biscuit");
    expect(ctx.budget.max_context_tokens).toBe(1000);
    await pg.deleteConversation(chat);
    await pg.eraseAgent(who);
  });

  test("health and readiness", async () => {
    const pg = client();
    expect((await pg.health()).status).toBe("ok");
    expect(await pg.ready()).toEqual({ status: "ok", checks: { postgres: "ok", redis: "ok", warm: "ok" } });
  });
});

describe("conversations", () => {
  test("append in order and idempotently, list, search by speaker, assemble without the history, delete", async () => {
    const pg = client();
    const who = agent("chat");
    const chat = agent("conv");
    const turns = [
      { content: "What do you do to unwind after work?", speaker: "Melanie", session_id: "s1", message_id: "t1",
        occurred_at: "2023-05-08T13:56:00Z" },
      { content: "I go swimming with the kids every evening.", speaker: "Caroline", session_id: "s1", message_id: "t2" },
      { content: "What should I bring to the pool?", role: "user" as const, message_id: "t3" },
    ];
    const out = await pg.appendMessages(chat, turns, { agent_id: who });
    expect(out.created).toBe(true);
    expect(out.messages.map((m) => m.position)).toEqual([1, 2, 3]);
    const again = await pg.appendMessages(chat, turns.slice(0, 2));
    expect(again.messages.map((m) => m.created)).toEqual([false, false]);
    expect(again.message_count).toBe(3);
    const page = await pg.listMessages(chat, { limit: 2 });
    expect(page.items.map((m) => m.speaker)).toEqual(["Melanie", "Caroline"]);
    const rest = await pg.listMessages(chat, { cursor: page.next_cursor ?? undefined });
    expect(rest.items[0]?.role).toBe("user");
    expect((await pg.listMessages(chat, { session_id: "s1" })).items.map((m) => m.position)).toEqual([1, 2]);
    expect((await pg.getConversation(chat)).agent_id).toBe(who);
    expect((await pg.listConversations({ agent_id: who })).items.map((c) => c.id)).toEqual([chat]);

    const reply = out.messages[1]?.id;
    const found = await pg.search("What does Caroline do to unwind?", { filters: { agent_id: who } });
    const hit = found.results.find((r) => r.id === reply);
    expect(hit?.message).toMatchObject({ conversation_id: chat, position: 2, speaker: "Caroline" });
    const history = await pg.assemble(who, "What does Caroline do to unwind?", {
      max_context_tokens: 1000, retrieval: { strategy: "lexical" }, conversation_id: chat, history_turns: 2 });
    expect(history.memories_used.map((m) => m.id)).not.toContain(reply);
    expect(history.dropped.find((d) => d.id === reply)?.reason).toBe("in_history");

    const newest = await pg.listMessages(chat, { order: "desc", limit: 1 });
    expect(newest.items.map((m) => m.message_id)).toEqual(["t3"]);
    const changed = await pg.truncateConversation(chat, 3, { message_count: 2 }).catch((e: unknown) => e);
    expect(changed).toBeInstanceOf(Conflict);
    expect((changed as Conflict).code).toBe("conversation_changed");
    const notLast = await pg.truncateConversation(chat, 3, { last_id: out.messages[1]?.id ?? "" }).catch((e: unknown) => e);
    expect((notLast as Conflict).code).toBe("conversation_changed");
    expect(await pg.truncateConversation(chat, 3, { message_count: 3, last_id: out.messages[2]?.id ?? "" })).toEqual(
      { conversation_id: chat, messages_deleted: 1, message_count: 2 });
    expect((await pg.deleteConversation(chat)).messages_deleted).toBe(2);
    await expect(pg.getConversation(chat)).rejects.toBeInstanceOf(NotFound);
  });

  test("a removal naming another agent is refused; one naming the owner, or no agent, goes", async () => {
    const recorder = new Recorder();
    const pg = client({ fetch: recorder.fetch });
    const who = agent("chat");
    const chat = agent("conv");
    await pg.appendMessages(chat, [{ content: "one" }, { content: "two" }, { content: "three" }], { agent_id: who });
    for (const refused of [() => pg.truncateConversation(chat, 1, { agent_id: agent("other") }),
      () => pg.deleteConversation(chat, { agent_id: agent("other") })]) {
      const error = await refused().catch((e: unknown) => e);
      expect(error).toBeInstanceOf(Conflict);
      expect((error as Conflict).code).toBe("conversation_agent_mismatch");
      expect((error as Conflict).details).toEqual({ agent_id: who });
    }
    expect((await pg.getConversation(chat)).message_count).toBe(3); // nothing removed
    expect(await pg.truncateConversation(chat, 3, { agent_id: who })).toEqual(
      { conversation_id: chat, messages_deleted: 1, message_count: 2 });
    // request options alone as the second argument, as before: no agent named
    expect((await pg.deleteConversation(chat, { idempotencyKey: `del-${chat}` })).messages_deleted).toBe(2);
    expect(recorder.sent.at(-1)?.headers.get("Idempotency-Key")).toBe(`del-${chat}`);
    await pg.appendMessages(chat, [{ content: "again" }], { agent_id: who });
    expect((await pg.deleteConversation(chat, { agent_id: who }, { idempotencyKey: `del2-${chat}` })).messages_deleted)
      .toBe(1);
    expect(recorder.sent.at(-1)?.headers.get("Idempotency-Key")).toBe(`del2-${chat}`);
  });
});

describe("export", () => {
  test("a consumer may stop early; an unknown agent's export is just its envelope", async () => {
    const pg = client();
    const who = agent("exp");
    await pg.createMemories([{ text: "one", agent_id: who }, { text: "two", agent_id: who }]);
    for await (const line of pg.export(who)) {
      expect(line.type).toBe("export");
      break; // the stream is cancelled, the connection released
    }
    const lines = [];
    for await (const line of pg.export(agent("nobody"))) lines.push(line.type);
    expect(lines).toEqual(["export", "end"]);
    expect((await pg.eraseAgent(who)).deleted).toBe(2);
  });
});

describe("export timing", () => {
  test("lines may come minutes apart: the client's per-try limit (30 s by default) covers only the answer's start", async () => {
    // A large org's export reads each batch in one statement, which the service lets run up to 60 s: the
    // stream may pause that long between lines. The live answer is replayed with such a pause, on fake
    // timers (no real wait), through a client with the default limits.
    const who = agent("exp");
    await client().createMemories([{ text: "one", agent_id: who }, { text: "two", agent_id: who }]);
    const live = await fetch(`${required("PGCONTEXT_URL")}/v1/export?agent_id=${who}`,
      { headers: { Authorization: `Bearer ${required("PGCONTEXT_API_KEY")}` } });
    const [header = "", ...rest] = (await live.text()).split(/(?<=\n)/);
    const pauseMs = 90_000;
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout"] });
    try {
      const pausing: typeof fetch = async (_input, init) => {
        const encoder = new TextEncoder();
        const body = new ReadableStream<Uint8Array>({
          async start(controller) {
            // As fetch does: an abort (the client's limit, were it still running) breaks the body.
            init?.signal?.addEventListener("abort", () => controller.error(new Error("aborted by the client")));
            controller.enqueue(encoder.encode(header));
            await new Promise((resolve) => { setTimeout(resolve, pauseMs); });
            for (const line of rest) controller.enqueue(encoder.encode(line));
            controller.close();
          },
        });
        return new Response(body, { status: 200, headers: live.headers });
      };
      const pg = new Client({ url: required("PGCONTEXT_URL"), apiKey: required("PGCONTEXT_API_KEY"), fetch: pausing });
      const reading = (async () => {
        const types: string[] = [];
        for await (const line of pg.export(who)) types.push(line.type);
        return types;
      })();
      await vi.advanceTimersByTimeAsync(pauseMs);
      expect(await reading).toEqual([header, ...rest].map((line) => (JSON.parse(line) as ExportLine).type));
    } finally {
      vi.useRealTimers();
    }
    await client().eraseAgent(who);
  });
});

describe("export completeness", () => {
  // The live service's export, cut as a proxy or a broken connection would cut it.
  const collect = async (pg: Client, who: string): Promise<{ lines: ExportLine[]; error: unknown }> => {
    const lines: ExportLine[] = [];
    try {
      for await (const line of pg.export(who)) lines.push(line);
    } catch (error) {
      return { lines, error };
    }
    return { lines, error: null };
  };
  const withoutLast = (body: string): string => body.replace(/[^\n]*\n$/, "");
  // The lines of two exports of the same data, but for the header's time.
  const same = (lines: ExportLine[]): unknown[] => lines.map((l) => (l.type === "export" ? { ...l, exported_at: 0 } : l));

  test("a stream that stops before its end line, or mid-line, throws IncompleteExport after the lines that came", async () => {
    const who = agent("exp");
    await client().createMemories([{ text: "one", agent_id: who }, { text: "two", agent_id: who }]);
    const whole = await collect(client(), who);
    expect(whole.error).toBeNull();
    expect(whole.lines.at(-1)?.type).toBe("end");

    const cut = await collect(client({ fetch: cutting(withoutLast) }), who);
    expect(same(cut.lines)).toEqual(same(whole.lines.slice(0, -1)));
    expect(cut.error).toBeInstanceOf(IncompleteExport);
    expect(cut.error).toMatchObject({ status: 0, code: "export_incomplete" });
    expect((cut.error as IncompleteExport).message).toMatch(/without its end line; run the export again$/);
    expect((cut.error as IncompleteExport).requestId).toBeTruthy();

    const midLine = await collect(client({ fetch: cutting((body) => body.slice(0, body.lastIndexOf("\n", body.length - 2) + 9)) }), who);
    expect(same(midLine.lines)).toEqual(same(whole.lines.slice(0, -1)));
    expect(midLine.error).toBeInstanceOf(IncompleteExport);
    expect(midLine.error).toMatchObject({ code: "export_incomplete" });
    expect((midLine.error as IncompleteExport).message).toContain("is not JSON");

    const afterEnd = await collect(client({ fetch: cutting((body) => `${body}${body.split("\n")[0]}\n`) }), who);
    expect(same(afterEnd.lines)).toEqual(same(whole.lines));
    expect(afterEnd.error).toBeInstanceOf(IncompleteExport);
    expect((afterEnd.error as IncompleteExport).message).toContain("a line after the end line");
    await client().eraseAgent(who);
  });

  test("the service's error line (a failure after the answer started) throws IncompleteExport with its code", async () => {
    const who = agent("exp");
    await client().createMemory("three", { agent_id: who });
    // What the service writes in place of the rest when reading fails part-way.
    const failed = `${JSON.stringify({ type: "error", code: "export_failed", message: "the export stopped part-way; retry it" })}\n`;
    const { lines, error } = await collect(client({ fetch: cutting((body) => `${body.split("\n")[0]}\n${failed}`) }), who);
    expect(lines.map((l) => l.type)).toEqual(["export"]);
    expect(error).toBeInstanceOf(IncompleteExport);
    expect(error).toMatchObject({ status: 0, code: "export_failed" });
    expect((error as IncompleteExport).message).toContain("the export stopped part-way; retry it");
    await client().eraseAgent(who);
  });
});

describe("path segments", () => {
  test("ids with dots, colons, slashes and non-ASCII letters are one escaped segment each", async () => {
    const recorder = new Recorder();
    const pg = client({ fetch: recorder.fetch });
    const who = `${agent("a.b")}:c@d.e`;
    await pg.putDirective(who, "Be brief.");
    expect(recorder.sent.at(-1)?.path).toBe(`/v1/agents/${encodeURIComponent(who)}/directive`);
    expect((await pg.getDirective(who)).agent_id).toBe(who);
    await pg.deleteDirective(who);
    const chat = `${agent("conv")}.v2`;
    await pg.appendMessages(chat, [{ content: "hi", role: "user", message_id: "1.0" }]);
    expect((await pg.getConversation(chat)).id).toBe(chat);
    expect((await pg.listMessages(chat)).items.map((m) => m.message_id)).toEqual(["1.0"]);
    expect((await pg.deleteConversation(chat)).messages_deleted).toBe(1);

    // A slash stays inside its segment: never another agent's directive ("a"'s, at /v1/agents/a/...).
    const slashed = await pg.getDirective("a/b").catch((error: unknown) => error);
    expect(slashed).toBeInstanceOf(PgcontextError);
    expect(recorder.sent.at(-1)?.path).toBe("/v1/agents/a%2Fb/directive");
    const accented = await pg.getDirective("ünï").catch((error: unknown) => error);
    expect(accented).toBeInstanceOf(ValidationError);
    expect(recorder.sent.at(-1)?.path).toBe("/v1/agents/%C3%BCn%C3%AF/directive");
  });

  test("an empty id, or one of dots only, is refused before sending (fetch would resolve it to another endpoint)", async () => {
    const recorder = new Recorder();
    const pg = client({ fetch: recorder.fetch });
    const calls: Array<[string, () => Promise<unknown>]> = [
      ["getMemory('.')", () => pg.getMemory(".")], // would be GET /v1/memories/: a page of memories
      ["getMemory('')", () => pg.getMemory("")],
      ["getConversation('.')", () => pg.getConversation(".")], // GET /v1/conversations/: the list
      ["listMessages('..')", () => pg.listMessages("..")],
      ["getDirective('..')", () => pg.getDirective("..")],
      ["deleteConversation('.')", () => pg.deleteConversation(".")],
      ["deleteMemory('.')", () => pg.deleteMemory(".")], // DELETE /v1/memories/: the agent erasure
      ["undoEvent('m', '..')", () => pg.undoEvent("m", "..")],
    ];
    for (const [name, work] of calls) {
      const error = await work().then(() => null, (caught: unknown) => caught);
      expect(error, name).toBeInstanceOf(ValidationError);
      expect(error, name).toMatchObject({ status: 400, code: "validation_error" });
      expect((error as ValidationError).message, name).toContain("nothing was sent");
    }
    expect(recorder.sent).toEqual([]);
  });
});

describe("configuration", () => {
  test("URL and API key come from PGCONTEXT_URL and PGCONTEXT_API_KEY when not given", async () => {
    const pg = new Client();
    expect(pg.url).toBe(required("PGCONTEXT_URL").replace(/\/+$/, ""));
    expect((await pg.listMemories({ limit: 1 })).items).toBeInstanceOf(Array);
  });

  test("without PGCONTEXT_URL the default is 127.0.0.1 on PGCONTEXT_PORT, else 8080", () => {
    const saved = { url: process.env.PGCONTEXT_URL, port: process.env.PGCONTEXT_PORT };
    try {
      delete process.env.PGCONTEXT_URL;
      delete process.env.PGCONTEXT_PORT;
      expect(new Client().url).toBe("http://127.0.0.1:8080");
      process.env.PGCONTEXT_PORT = "18399";
      expect(new Client().url).toBe("http://127.0.0.1:18399");
      expect(new Client({ url: "http://example.test:9/" }).url).toBe("http://example.test:9");
    } finally {
      process.env.PGCONTEXT_URL = saved.url;
      if (saved.port === undefined) delete process.env.PGCONTEXT_PORT;
      else process.env.PGCONTEXT_PORT = saved.port;
    }
  });
});
