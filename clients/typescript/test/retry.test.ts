/** Idempotency keys on writes, retries of the service's own 503 `overloaded`, and the caller's deadline. */

import { randomUUID } from "node:crypto";
import { describe, expect, test } from "vitest";

import { Client, Conflict, DeadlineExceeded, Overloaded, RetryPolicy } from "pgcontext";

import { newIdempotencyKey } from "../src/http.js";
import { agent, apiKey, client, Recorder, required } from "./live.js";

describe("idempotency", () => {
  test("each write carries a new key, reads none; a replayed key creates nothing, a reused one conflicts", async () => {
    const recorder = new Recorder();
    const pg = client({ fetch: recorder.fetch });
    const who = agent("idem");
    const first = await pg.createMemory("Remember the milk.", { agent_id: who });
    const second = await pg.createMemory("Remember the milk.", { agent_id: who, on_duplicate: "keep" });
    const keys = recorder.sent.map((r) => r.headers.get("idempotency-key"));
    expect(new Set(keys).size).toBe(2);
    expect(first.ids).not.toEqual(second.ids); // a new key per call: two memories
    await pg.getMemory(first.ids[0] as string);
    expect(recorder.sent.at(-1)?.headers.has("idempotency-key")).toBe(false);

    const mine = randomUUID();
    const once = await pg.createMemory("Remember the eggs.", { agent_id: who }, { idempotencyKey: mine });
    const replay = await pg.createMemory("Remember the eggs.", { agent_id: who }, { idempotencyKey: mine });
    expect(replay.ids).toEqual(once.ids);
    expect(recorder.sent.at(-1)?.headers.get("idempotency-key")).toBe(mine);
    expect((await pg.listMemories({ agent_id: who })).items).toHaveLength(3);
    const conflict = await pg.createMemory("Remember the bread.", { agent_id: who }, { idempotencyKey: mine })
      .catch((error: unknown) => error);
    expect(conflict).toBeInstanceOf(Conflict);
    expect((conflict as Conflict).status).toBe(409);
    expect((conflict as Conflict).requestId).toBeTruthy();
    await pg.eraseAgent(who);
  });

  test("an append sent again with its key is answered the first append's result and writes nothing", async () => {
    const pg = client();
    const chat = agent("conv");
    const key = randomUUID();
    const messages = [{ content: "No message ids here.", role: "user" as const }];
    const first = await pg.appendMessages(chat, messages, {}, { idempotencyKey: key });
    const again = await pg.appendMessages(chat, messages, {}, { idempotencyKey: key });
    expect(again).toEqual(first);
    expect((await pg.getConversation(chat)).message_count).toBe(1);
    const other = await pg.appendMessages(chat, [{ content: "Another.", role: "user" }], {}, { idempotencyKey: key })
      .catch((error: unknown) => error);
    expect(other).toMatchObject({ status: 409, code: "idempotency_key_reused" });
    await pg.deleteConversation(chat);
  });

  test("a report whose answer was lost is sent again under its key and moves usefulness once", async () => {
    const pg = client();
    const who = agent("fb");
    const [retried, control] = (await pg.createMemories([
      { text: "Dana's espresso is a double.", agent_id: who },
      { text: "The grinder is set to 4 for espresso.", agent_id: who },
    ])).ids as [string, string];
    // The first try reaches the service and is counted; its answer is lost on the way back (a connection
    // reset after the service answered), so the client cannot know whether it was.
    const tries: Array<{ key: string | null; replayed: string | null }> = [];
    const losingFirstAnswer: typeof fetch = async (input, init) => {
      const response = await fetch(input, init);
      tries.push({ key: new Headers(init?.headers).get("idempotency-key"),
        replayed: response.headers.get("idempotent-replayed") });
      if (tries.length > 1) return response;
      await response.text();
      throw new TypeError("fetch failed", { cause: Object.assign(new Error("other side closed"), { code: "ECONNRESET" }) });
    };
    const answer = await client({ fetch: losingFirstAnswer, retry: { attempts: 3, backoffMs: 10 } })
      .feedback({ [retried]: true });
    expect(tries).toHaveLength(2);
    expect(tries[1]?.key).toBe(tries[0]?.key); // one key for both tries
    expect(tries[1]?.replayed).toBe("true"); // the second was answered with the first's answer
    expect(answer.updated).toMatchObject([{ id: retried, feedback_count: 1 }]);

    // The report moved usefulness once: a memory reported once without loss stands where it stands.
    const once = await pg.feedback({ [control]: true });
    expect(answer.updated[0]?.usefulness).toBe(once.updated[0]?.usefulness);
    const next = await pg.feedback({ [retried]: true, [control]: true });
    expect(next.updated.map((u) => u.feedback_count)).toEqual([2, 2]);
    expect(new Set(next.updated.map((u) => u.usefulness)).size).toBe(1);

    // Another report under the same key is refused, not counted.
    const reused = await pg.feedback({ [control]: false }, { idempotencyKey: tries[0]?.key ?? "" })
      .catch((error: unknown) => error);
    expect(reused).toMatchObject({ status: 409, code: "idempotency_key_reused" });
    await pg.eraseAgent(who);
  });

  test("without Web Crypto (Node 18) keys are still version 4 UUIDs, all different", () => {
    const saved = Object.getOwnPropertyDescriptor(globalThis, "crypto");
    Object.defineProperty(globalThis, "crypto", { value: undefined, configurable: true });
    try {
      const keys = Array.from({ length: 2000 }, () => newIdempotencyKey());
      for (const key of keys) expect(key).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
      expect(new Set(keys).size).toBe(keys.length);
    } finally {
      if (saved) Object.defineProperty(globalThis, "crypto", saved);
    }
    expect(newIdempotencyKey()).toMatch(/^[0-9a-f-]{36}$/);
  });
});

describe("retries", () => {
  // The slow service runs one assembly at a time with no queue and slows each by 600 ms: a concurrent
  // second assembly is refused with 503 `overloaded` and `Retry-After: 1`.
  const slow = (options: { fetch?: typeof fetch; retry?: RetryPolicy } = {}): Client =>
    new Client({ url: required("PGCONTEXT_SLOW_URL"), apiKey: apiKey(), ...options });

  test("a 503 overloaded is retried after Retry-After with the same Idempotency-Key", async () => {
    const who = agent("retry");
    await slow().createMemory("The espresso machine is on the third floor.", { agent_id: who });
    const recorder = new Recorder();
    const pg = slow({ fetch: recorder.fetch });
    const started = performance.now();
    const both = await Promise.all([0, 1].map(() =>
      pg.assemble(who, "where is the espresso machine?", { max_context_tokens: 2000 })));
    const elapsed = performance.now() - started;
    for (const ctx of both) expect(ctx.context).toContain("espresso");
    const statuses = recorder.sent.map((r) => r.status);
    expect(statuses).toContain(503);
    expect(statuses.filter((s) => s === 200)).toHaveLength(2);
    expect(elapsed).toBeGreaterThanOrEqual(1000); // the refused one waited the service's Retry-After (1 s)

    const byKey = new Map<string, Array<number | null>>();
    for (const r of recorder.sent) {
      const key = r.headers.get("idempotency-key") ?? "";
      byKey.set(key, [...(byKey.get(key) ?? []), r.status]);
    }
    expect(byKey.size).toBe(2); // two calls, each with one key for all of its tries
    expect([...byKey.values()].map((s) => s.at(-1))).toEqual([200, 200]);
    expect([...byKey.values()].some((s) => s.length >= 2 && s[0] === 503)).toBe(true);
  });

  test("with retries off the refusal is an Overloaded error carrying Retry-After", async () => {
    const who = agent("retry");
    const pg = slow({ retry: new RetryPolicy({ attempts: 1 }) });
    const results = await Promise.allSettled([0, 1].map(() => pg.assemble(who, "espresso?", { max_context_tokens: 2000 })));
    const refused = results.flatMap((r) => (r.status === "rejected" ? [r.reason as unknown] : []));
    expect(refused).toHaveLength(1);
    expect(refused[0]).toBeInstanceOf(Overloaded);
    expect(refused[0]).toMatchObject({ status: 503, code: "overloaded", retryAfterS: 1 });
  });

  test("the caller's timeoutMs is sent as X-Timeout-Ms and met; once passed the answer is DeadlineExceeded", async () => {
    const recorder = new Recorder();
    const pg = slow({ fetch: recorder.fetch });
    const ctx = await pg.assemble(agent("late"), "espresso?", { max_context_tokens: 2000 }, { timeoutMs: 1500 });
    expect(ctx.metrics.total_ms).toBeLessThan(1500); // the slowed search gave way to the deadline
    const sent = Number(recorder.sent[0]?.headers.get("x-timeout-ms"));
    expect(sent).toBeGreaterThan(1000);
    expect(sent).toBeLessThanOrEqual(1500);

    const error = await pg.assemble(agent("late"), "espresso?", { max_context_tokens: 2000 }, { timeoutMs: 0 })
      .catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(DeadlineExceeded);
    expect(error).toMatchObject({ status: 504, code: "deadline_exceeded", details: { level: "L3" } });
    expect(recorder.sent.at(-1)?.headers.get("x-timeout-ms")).toBe("0");
  });

  test("a write answered 409 idempotency_in_progress is sent again for its first request's answer", async () => {
    // The first try is answered as the service answers a key whose first request still runs.
    const keys: Array<string | null> = [];
    const inProgressFirst: typeof fetch = async (input, init) => {
      keys.push(new Headers(init?.headers).get("idempotency-key"));
      if (keys.length > 1) return fetch(input, init);
      return new Response(JSON.stringify({ error: { code: "idempotency_in_progress", message: "still running",
        details: {}, request_id: "r" } }), { status: 409, headers: { "Content-Type": "application/json" } });
    };
    const pg = client({ fetch: inProgressFirst, retry: { attempts: 3, backoffMs: 10 } });
    const who = agent("busy");
    const written = await pg.createMemory("The milk fridge is by the window.", { agent_id: who });
    expect(keys).toHaveLength(2);
    expect(keys[1]).toBe(keys[0]);
    expect((await pg.listMemories({ agent_id: who })).items.map((m) => m.id)).toEqual(written.ids);
    await pg.eraseAgent(who);

    const policy = new RetryPolicy();
    const conflict = new Response("", { status: 409 });
    expect(policy.afterResponse({ repeatable: true }, conflict, 1, "idempotency_in_progress")).not.toBeNull();
    expect(policy.afterResponse({ repeatable: true }, conflict, 1, "idempotency_key_reused")).toBeNull();
    expect(policy.afterResponse({ repeatable: true }, conflict, 4, "idempotency_in_progress")).toBeNull();
  });

  test("the policy's backoff doubles up to its ceiling, with jitter in the upper half", () => {
    const policy = new RetryPolicy({ backoffMs: 100, maxBackoffMs: 350 });
    for (const [attempt, ceiling] of [[1, 100], [2, 200], [3, 350], [6, 350]] as const) {
      const wait = policy.backoff(attempt);
      expect(wait).toBeGreaterThanOrEqual(ceiling / 2);
      expect(wait).toBeLessThanOrEqual(ceiling);
    }
    expect(() => new RetryPolicy({ attempts: 0 })).toThrow(RangeError);
  });

  test("a call that is not repeatable is tried again only after a refusal that did nothing", () => {
    const policy = new RetryPolicy();
    const answer = (status: number): Response => new Response("", { status });
    const once = { repeatable: false }; // undoEvent
    const again = { repeatable: true };
    expect(policy.afterResponse(once, answer(429), 1, "rate_limited")).not.toBeNull();
    expect(policy.afterResponse(once, answer(503), 1, "overloaded")).not.toBeNull();
    // Another 503 (a dependency failed, perhaps at commit) may come after the write was made.
    expect(policy.afterResponse(once, answer(503), 1, "search_unavailable")).toBeNull();
    expect(policy.afterResponse(once, answer(503), 1, null)).toBeNull();
    expect(policy.afterResponse(again, answer(503), 1, "search_unavailable")).not.toBeNull();
    expect(policy.afterResponse(again, answer(500), 1, "internal_error")).toBeNull();
  });
});
