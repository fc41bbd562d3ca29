/**
 * One API call (`Call`) and how it is sent: headers, an `Idempotency-Key` kept across retries, the
 * caller's deadline as `X-Timeout-Ms`, a local timeout per try, and the retry policy's waits.
 */

import { fromResponse, PgcontextError, TransportError } from "./errors.js";
import { RetryPolicy, type Retryable } from "./retry.js";

export const VERSION = "0.1.0";
const WRITE_METHODS: ReadonlySet<string> = new Set(["POST", "PUT", "PATCH", "DELETE"]);

/** Options every method takes as its last argument. */
export interface RequestOptions {
  /** Writes: the `Idempotency-Key` (default a new UUID per call, the same on every retry of it). */
  idempotencyKey?: string;
  /**
   * Your own deadline in ms, sent as `X-Timeout-Ms` (what is left of it on a retry). The service answers
   * 504 (`DeadlineExceeded`) past it, never a partial context; no retry starts after it.
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

export function segment(value: string): string {
  return encodeURIComponent(value);
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

  constructor(timeoutMs: number, private readonly caller: AbortSignal | undefined) {
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

/** An answer and its try: the caller reads the body, then calls `done` (`untimed` first for a long stream). */
export interface Sent {
  response: Response;
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

  private transportError(call: Call, error: unknown, attempt: Attempt): TransportError {
    const reason = attempt.timedOut ? `timed out after ${this.config.timeoutMs} ms`
      : error instanceof Error ? `${error.name}: ${error.message}${describeCause(error.cause)}` : String(error);
    return new TransportError(`${call.method} ${call.path}: ${reason}`, error);
  }

  /** Send `call`, retrying as the policy says; the answer's try stays open until `done()`. */
  async send(call: Call): Promise<Sent> {
    const { retry } = this.config;
    const headers = this.headers(call);
    const body = call.body === undefined ? undefined : JSON.stringify(call.body);
    const signal = call.options?.signal;
    const timeoutMs = call.options?.timeoutMs;
    const deadline = timeoutMs === undefined ? null : Date.now() + timeoutMs;
    for (let number = 1; ; number++) {
      if (deadline !== null) headers["X-Timeout-Ms"] = String(Math.max(0, Math.ceil(deadline - Date.now())));
      const attempt = new Attempt(this.config.timeoutMs, signal);
      let wait: number | null;
      try {
        const response = await this.config.fetch(this.url(call), {
          method: call.method, headers, body, signal: attempt.controller.signal,
        });
        wait = retry.afterResponse(call, response, number);
        if (wait === null || (deadline !== null && Date.now() + wait >= deadline)) {
          return { response, untimed: () => attempt.untimed(), done: () => attempt.done() };
        }
        attempt.done();
        await response.body?.cancel();
      } catch (error) {
        attempt.done();
        if (signal?.aborted) throw signal.reason;
        wait = retry.afterTransportError(call, number);
        if (wait === null || (deadline !== null && Date.now() + wait >= deadline)) {
          throw this.transportError(call, error, attempt);
        }
      }
      await sleep(wait, signal);
    }
  }

  /** Send `call` and decode its JSON answer (an error answer throws its `PgcontextError`). */
  async json<T>(call: Call): Promise<T> {
    const { response, done } = await this.send(call);
    let text: string;
    try {
      text = await response.text();
    } catch (error) {
      if (call.options?.signal?.aborted) throw call.options.signal.reason;
      throw new TransportError(`${call.method} ${call.path}: the answer broke off: ${String(error)}`, error);
    } finally {
      done();
    }
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
