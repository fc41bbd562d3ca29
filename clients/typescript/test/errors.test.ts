/** Typed errors from real answers of a live service, and a transport error when nothing listens. */

import { randomUUID } from "node:crypto";
import { describe, expect, test } from "vitest";

import {
  BadRequest,
  Client,
  Conflict,
  DeadlineExceeded,
  fromResponse,
  NotFound,
  Overloaded,
  PgcontextError,
  RateLimited,
  ServerError,
  TransportError,
  Unauthorized,
  Unprocessable,
  ValidationError,
} from "pgcontext";

import { agent, client, closedPort, Recorder, required, silentListener, url } from "./live.js";

async function failure(promise: Promise<unknown>): Promise<PgcontextError> {
  const error = await promise.then(() => null, (caught: unknown) => caught);
  expect(error).toBeInstanceOf(PgcontextError);
  return error as PgcontextError;
}

describe("error answers", () => {
  test("401 Unauthorized for an unknown key", async () => {
    const error = await failure(new Client({ url: url(), apiKey: "pgc_not_a_key" }).listMemories());
    expect(error).toBeInstanceOf(Unauthorized);
    expect(error).toMatchObject({ status: 401, code: "unauthorized" });
    expect(error.requestId).toBeTruthy();
  });

  test("404 NotFound carries code, message, details and the request id", async () => {
    const missing = randomUUID();
    const error = await failure(client().getMemory(missing));
    expect(error).toBeInstanceOf(NotFound);
    expect([error.status, error.code]).toEqual([404, "not_found"]);
    expect(error.message).toContain(missing);
    expect(error.details).toBeTypeOf("object");
    expect(error.requestId?.length).toBeGreaterThanOrEqual(16);
    expect(String(error)).toBe(`404 not_found: ${error.message}, request_id=${error.requestId}`);
    expect(error.name).toBe("NotFound");
  });

  test("another org's memory answers NotFound", async () => {
    const theirs = new Client({ url: url(), apiKey: required("PGCONTEXT_OTHER_API_KEY") });
    const { ids } = await theirs.createMemory("Another org's secret.", { agent_id: agent("other") });
    const error = await failure(client().getMemory(ids[0] as string));
    expect(error).toBeInstanceOf(NotFound);
    expect((await theirs.getMemory(ids[0] as string)).text).toBe("Another org's secret.");
  });

  test("400 ValidationError (a BadRequest) says which field is invalid", async () => {
    const error = await failure(client().createMemory("x", { agent_id: "not a valid agent id!" }));
    expect(error).toBeInstanceOf(ValidationError);
    expect(error).toBeInstanceOf(BadRequest);
    expect([error.status, error.code]).toEqual([400, "validation_error"]);
    expect(error.message).toContain("$.agent_id");
  });

  test("400 with another code is a BadRequest, 422 is Unprocessable", async () => {
    const pg = client();
    const unknownModel = await failure(pg.assemble("a", "q", { model: "no-such-model", max_context_tokens: 1000 }));
    expect(unknownModel).toBeInstanceOf(BadRequest);
    expect(unknownModel).not.toBeInstanceOf(ValidationError);
    expect(unknownModel.code).toBe("unknown_model");
    expect(unknownModel.message).toContain("no-such-model");
    const small = await failure(pg.assemble("a", "q", { max_context_tokens: 5 }));
    expect(small).toBeInstanceOf(Unprocessable);
    expect([small.status, small.code]).toEqual([422, "context_budget_too_small"]);
  });

  test("the classes by status and code, whatever the body (a proxy's page still gives a typed error)", () => {
    const answer = (status: number, body: string, headers: Record<string, string> = {}): PgcontextError =>
      fromResponse(new Response(body, { status, headers }), body);
    const envelope = (code: string): string => JSON.stringify({ error: { code, message: "m", details: {}, request_id: "r" } });
    const limited = answer(429, envelope("rate_limited"), { "Retry-After": "2" });
    expect(limited).toBeInstanceOf(RateLimited);
    expect(limited).toMatchObject({ status: 429, retryAfterS: 2, code: "rate_limited", message: "m", requestId: "r" });
    expect(answer(503, envelope("overloaded"), { "Retry-After": "1" })).toBeInstanceOf(Overloaded);
    expect(answer(504, envelope("deadline_exceeded"))).toBeInstanceOf(DeadlineExceeded);
    expect(answer(409, envelope("idempotency_key_reused"))).toBeInstanceOf(Conflict);
    const html = answer(502, "<html>Bad gateway</html>", { "X-Request-ID": "edge-1" });
    expect(html).toBeInstanceOf(ServerError);
    expect(html).toMatchObject({ status: 502, code: "http_502", message: "<html>Bad gateway</html>", requestId: "edge-1" });
    // A proxy's Retry-After may be an HTTP date: the seconds until then (a past date: now).
    const dated = answer(503, envelope("overloaded"), { "Retry-After": new Date(Date.now() + 3000).toUTCString() });
    expect(dated.retryAfterS).toBeGreaterThan(1);
    expect(dated.retryAfterS).toBeLessThanOrEqual(3);
    expect(answer(429, envelope("rate_limited"), { "Retry-After": "Thu, 01 Jan 1970 00:00:00 GMT" }).retryAfterS).toBe(0);
    expect(answer(429, envelope("rate_limited"), { "Retry-After": "soon" }).retryAfterS).toBeNull();
    const teapot = answer(418, "");
    expect(teapot.constructor).toBe(PgcontextError);
    expect(teapot).toMatchObject({ status: 418, code: "http_418" });
  });
});

describe("transport", () => {
  test("nothing listening: every call is tried again (nothing was sent), then TransportError", async () => {
    const recorder = new Recorder();
    const pg = new Client({ url: `http://127.0.0.1:${await closedPort()}`, apiKey: "k", fetch: recorder.fetch,
      retry: { attempts: 3, backoffMs: 10 } });
    const error = await failure(pg.health());
    expect(error).toBeInstanceOf(TransportError);
    expect([error.status, error.code]).toEqual([0, "transport_error"]);
    expect(error.message).toMatch(/^GET \/healthz: .*ECONNREFUSED/);
    expect(error.cause).toBeInstanceOf(Error);
    expect(recorder.sent).toHaveLength(3);

    recorder.sent.length = 0;
    expect(await failure(pg.feedback({ [randomUUID()]: true }))).toBeInstanceOf(TransportError);
    expect(recorder.sent).toHaveLength(3); // a refused connection carried nothing: safe to try again
  });

  test("no answer once sent: repeatable calls are sent again (writes under their key), undo is not", async () => {
    const silent = await silentListener();
    try {
      const recorder = new Recorder();
      const pg = new Client({ url: silent.url, apiKey: "k", fetch: recorder.fetch, timeoutMs: 100,
        retry: { attempts: 3, backoffMs: 10 } });
      const tries = async (work: () => Promise<unknown>): Promise<number> => {
        recorder.sent.length = 0;
        const error = await failure(work());
        expect(error).toBeInstanceOf(TransportError);
        expect(error.message).toContain("timed out after 100 ms");
        return recorder.sent.length;
      };
      expect(await tries(() => pg.health())).toBe(3);
      // An append or a report carries its Idempotency-Key: a resent one that was written is answered, not
      // written (or counted) again.
      expect(await tries(() => pg.appendMessages("c", [{ content: "hi", role: "user" }]))).toBe(3);
      expect(await tries(() => pg.feedback({ [randomUUID()]: true }))).toBe(3);
      // An event is undone once (a resent undo would answer 409).
      expect(await tries(() => pg.undoEvent(randomUUID(), randomUUID()))).toBe(1);
    } finally {
      await silent.close();
    }
  });

  test("an answer that breaks off mid-body is retried as a broken connection is (repeatable calls only)", async () => {
    // The live service's answers, the first of every call broken after its first bytes.
    let broken = 0;
    const breaking: typeof fetch = async (input, init) => {
      const response = await fetch(input, init);
      if (broken++ % 2 === 1) return response;
      const head = (await response.text()).slice(0, 5);
      const body = new ReadableStream<Uint8Array>({
        start(controller) {
          controller.enqueue(new TextEncoder().encode(head));
          controller.error(new Error("other side closed"));
        },
      });
      return new Response(body, { status: response.status, headers: response.headers });
    };
    const pg = client({ fetch: breaking, retry: { attempts: 3, backoffMs: 10 } });
    expect((await pg.health()).status).toBe("ok");
    expect(broken).toBe(2);
    broken = 0;
    const report = await pg.feedback({ [randomUUID()]: true }); // sent again under its key
    expect(report.not_found).toHaveLength(1);
    expect(broken).toBe(2);
    broken = 0;
    const [memory, event] = [randomUUID(), randomUUID()];
    const error = await failure(pg.undoEvent(memory, event));
    expect(error).toBeInstanceOf(TransportError);
    expect(error.message)
      .toBe(`POST /v1/memories/${memory}/history/${event}/undo: the answer broke off: Error: other side closed`);
    expect(broken).toBe(1); // the event may have been undone: not sent again
  });

  test("a try with no answer past the caller's deadline fails soon after it, not at the client's timeout", async () => {
    const silent = await silentListener();
    try {
      const pg = new Client({ url: silent.url, apiKey: "k" }); // the client's own limit: 30 s a try
      const started = performance.now();
      const error = await failure(pg.health({ timeoutMs: 200 }));
      const elapsed = performance.now() - started;
      expect(error).toBeInstanceOf(TransportError);
      expect(error.message).toBe("GET /healthz: no answer 1000 ms past your deadline (timeoutMs 200)");
      expect(elapsed).toBeGreaterThanOrEqual(1150);
      expect(elapsed).toBeLessThan(5000);
    } finally {
      await silent.close();
    }
  });

  test("a try past the client's timeoutMs is a TransportError", async () => {
    const overloaded = required("PGCONTEXT_SLOW_URL");
    const pg = new Client({ url: overloaded, apiKey: required("PGCONTEXT_API_KEY"), timeoutMs: 100,
      retry: { attempts: 1 } });
    const error = await failure(pg.assemble(agent(), "espresso?", { max_context_tokens: 500 }));
    expect(error).toBeInstanceOf(TransportError);
    expect(error.message).toContain("timed out after 100 ms");
  });

  test("an aborted signal rejects with its reason, not a service error", async () => {
    const controller = new AbortController();
    controller.abort(new Error("the user left"));
    await expect(client().health({ signal: controller.signal })).rejects.toThrow("the user left");
  });
});
