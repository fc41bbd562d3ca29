/**
 * One API call (`Call`) and how it is sent: headers, an `Idempotency-Key` kept across retries, the
 * caller's deadline as `X-Timeout-Ms`, a local timeout per try, and the retry policy's waits.
 */

import { fromResponse, PgcontextError, TransportError, ValidationError } from "./errors.js";
import { RetryPolicy, type Retryable } from "./retry.js";

export const VERSION = "0.1.0";
const WRITE_METHODS: ReadonlySet<string> = new Set(["POST", "PUT", "PATCH", "DELETE"]);
/** How long past the caller's deadline a try may still wait for the service's own answer (its 504). */
export const DEADLINE_GRACE_MS = 1000;

/** Options every method takes as its last argument. */
export interface RequestOptions {
  /** Writes: the `Idempotency-Key` (default a new UUID per call, the same on every retry of it). */
  idempotencyKey?: string;
  /**
   * Your own deadline in ms, sent as `X-Timeout-Ms` (what is left of it on a retry). The service answers
   * 504 (`DeadlineExceeded`) past it, never a partial context; no retry starts after it, and a try that
   * has no answer `DEADLINE_GRACE_MS` (1 s) past it fails with `TransportError`.
   */
  timeoutMs?: number;
  /** Abort the call (its fetch and any wait between retries). */
  signal?: AbortSignal;
}

export interface Call extends Retryable {
  method: "GET" | "POST" | "PUT" | "PATCH" | "DELETE";
  path: string;
  query?: Array<[string, string]>;
  body?: unknown;
  options?: RequestOptions;
}

export interface TransportConfig {
  url: string;
  apiKey: string | null;
  timeoutMs: number;
  retry: RetryPolicy;
  fetch: typeof fetch;
  headers: Record<string, string>;
}

/** Query parameters, leaving out the unset ones (objects as JSON, arrays as repeated parameters). */
export function query(values: Record<string, unknown>): Array<[string, string]> {
  const params: Array<[string, string]> = [];
  for (const [name, value] of Object.entries(values)) {
    if (value === undefined || value === null) continue;
    for (const item of Array.isArray(value) ? (value as unknown[]) : [value]) {
      if (item instanceof Date) params.push([name, item.toISOString()]);
      else if (typeof item === "object" && item !== null) params.push([name, JSON.stringify(item)]);
      else params.push([name, String(item)]);
    }
  }
  return params;
}

/** `value` (an id) as one path segment: every character but letters, digits and `-_.!~*'()` escaped. */
export function segment(value: string): string {
  return encodeURIComponent(value);
}

/**
 * The path's first segment that URL resolution would change: an empty id, or one of dots only ("." or
 * ".."), which `fetch` resolves away however it is escaped (`%2E` included), sending the request to
 * another endpoint (`getMemory(".")` would list memories). Null when there is none.
 */
function unsendable(path: string): string | null {
  for (const part of path.split("/").slice(1)) if (part === "" || part === "." || part === "..") return part;
  return null;
}

/**
 * A new idempotency key: a random UUID from Web Crypto where the runtime has it as a global (browsers,
 * Deno, Bun, edge runtimes, Node 19+). Node 18 has no global `crypto`; there the key is a version 4 UUID
 * from `Math.random`, which is enough for a key whose only job is to be unique within your org.
 */
export function newIdempotencyKey(): string {
  const webCrypto = (globalThis as { crypto?: { randomUUID?: () => string } }).crypto;
  if (webCrypto?.randomUUID) return webCrypto.randomUUID();
  const hex = Array.from({ length: 32 }, () => Math.floor(Math.random() * 16).toString(16));
  hex[12] = "4";
  hex[16] = ((parseInt(hex[16] ?? "0", 16) & 0x3) | 0x8).toString(16);
  const h = hex.join("");
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

function sleep(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    const onAbort = (): void => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/** A try's abort signal: the caller's, or the local timeout, whichever fires first. */
class Attempt {
  readonly controller = new AbortController();
  timedOut = false;
  private readonly timer: ReturnType<typeof setTimeout>;
  private readonly onAbort = (): void => this.controller.abort(this.caller?.reason);

  constructor(readonly timeoutMs: number, private readonly caller: AbortSignal | undefined) {
    this.timer = setTimeout(() => {
      this.timedOut = true;
      this.controller.abort();
    }, timeoutMs);
    if (caller?.aborted) this.onAbort();
    else caller?.addEventListener("abort", this.onAbort, { once: true });
  }

  /** The local timeout no longer applies (a stream may now take as long as it needs). */
  untimed(): void {
    clearTimeout(this.timer);
  }

  done(): void {
    clearTimeout(this.timer);
    this.caller?.removeEventListener("abort", this.onAbort);
  }
}

/**
 * An answer and its try: the caller reads the body, then calls `done` (`untimed` first for a long stream).
 * `text` is the body, when `send` was asked to read it.
 */
export interface Sent {
  response: Response;
  text?: string;
  untimed: () => void;
  done: () => void;
}

export class Transport {
  constructor(readonly config: TransportConfig) {}

  private headers(call: Call): Record<string, string> {
    const headers: Record<string, string> = {
      "User-Agent": `pgcontext-js/${VERSION}`, Accept: "application/json", ...this.config.headers,
    };
    if (this.config.apiKey) headers.Authorization = `Bearer ${this.config.apiKey}`;
    if (WRITE_METHODS.has(call.method)) headers["Idempotency-Key"] = call.options?.idempotencyKey ?? newIdempotencyKey();
    if (call.body !== undefined) headers["Content-Type"] = "application/json";
    return headers;
  }

  private url(call: Call): string {
    const search = call.query?.length ? `?${new URLSearchParams(call.query).toString()}` : "";
    return `${this.config.url}${call.path}${search}`;
  }

  private transportError(call: Call, error: unknown, attempt: Attempt, reading: boolean): TransportError {
    const deadline = call.options?.timeoutMs;
    const reason = !attempt.timedOut
      ? error instanceof Error ? `${error.name}: ${error.message}${describeCause(error.cause)}` : String(error)
      : attempt.timeoutMs < this.config.timeoutMs && deadline !== undefined
        ? `no answer ${DEADLINE_GRACE_MS} ms past your deadline (timeoutMs ${deadline})`
        : `timed out after ${attempt.timeoutMs} ms`;
    return new TransportError(`${call.method} ${call.path}: ${reading ? "the answer broke off: " : ""}${reason}`, error);
  }

  /**
   * Send `call`, retrying as the policy says; the answer's try stays open until `done()`. With `read`, the
   * body is read within the try, so an answer that broke off is retried as a broken connection is.
   */
  async send(call: Call, read = false): Promise<Sent> {
    const { retry } = this.config;
    const signal = call.options?.signal;
    if (signal?.aborted) throw signal.reason;
    const bad = unsendable(call.path);
    if (bad !== null) {
      throw new ValidationError(`${call.method} ${call.path}: an id in the path is ${bad ? `"${bad}"` : "empty"}, `
        + "which URL resolution would drop (sending the request elsewhere); nothing was sent",
      { code: "validation_error", details: { path: call.path } });
    }
    const headers = this.headers(call);
    const body = call.body === undefined ? undefined : JSON.stringify(call.body);
    const timeoutMs = call.options?.timeoutMs;
    const deadline = timeoutMs === undefined ? null : Date.now() + timeoutMs;
    for (let number = 1; ; number++) {
      let limit = this.config.timeoutMs;
      if (deadline !== null) {
        const left = Math.max(0, Math.ceil(deadline - Date.now()));
        headers["X-Timeout-Ms"] = String(left);
        limit = Math.min(limit, left + DEADLINE_GRACE_MS);
      }
      const attempt = new Attempt(limit, signal);
      let wait: number | null;
      let reading = false;
      try {
        const response = await this.config.fetch(this.url(call), {
          method: call.method, headers, body, signal: attempt.controller.signal,
        });
        const code = retry.needsCode(call, response.status) ? await errorCode(response) : null;
        wait = retry.afterResponse(call, response, number, code);
        if (wait === null || (deadline !== null && Date.now() + wait >= deadline)) {
          const sent: Sent = { response, untimed: () => attempt.untimed(), done: () => attempt.done() };
          if (!read) return sent;
          reading = true;
          sent.text = await response.text();
          return sent;
        }
        attempt.done();
        await response.body?.cancel();
      } catch (error) {
        attempt.done();
        if (signal?.aborted) throw signal.reason;
        wait = retry.afterTransportError(call, number, error);
        if (wait === null || (deadline !== null && Date.now() + wait >= deadline)) {
          throw this.transportError(call, error, attempt, reading);
        }
      }
      await sleep(wait, signal);
    }
  }

  /** Send `call` and decode its JSON answer (an error answer throws its `PgcontextError`). */
  async json<T>(call: Call): Promise<T> {
    const { response, text = "", done } = await this.send(call, true);
    done();
    if (!response.ok && !call.accept?.includes(response.status)) throw fromResponse(response, text);
    if (response.status === 204 || text === "") return undefined as T;
    try {
      return JSON.parse(text) as T;
    } catch (error) {
      throw new PgcontextError(`${call.method} ${call.path}: the answer is not JSON: ${text.slice(0, 200)}`, {
        status: response.status, code: "invalid_response", cause: error,
        requestId: response.headers.get("x-request-id"),
      });
    }
  }
}

/** The `code` of an error answer's envelope, read from a copy of it (null: none). */
async function errorCode(response: Response): Promise<string | null> {
  try {
    const parsed = JSON.parse(await response.clone().text()) as { error?: { code?: unknown } } | null;
    return typeof parsed?.error?.code === "string" ? parsed.error.code : null;
  } catch {
    return null;
  }
}

function describeCause(cause: unknown): string {
  if (cause instanceof Error) {
    const code = (cause as { code?: unknown }).code;
    return ` (${typeof code === "string" ? `${code}: ` : ""}${cause.message})`;
  }
  return "";
}

/** The process environment where the runtime has one (`process.env`), else nothing. */
export function env(): Record<string, string | undefined> {
  const proc = (globalThis as { process?: { env?: Record<string, string | undefined> } }).process;
  return proc?.env ?? {};
}
