/** When to try a call again: the Python client's `RetryPolicy`, in milliseconds. */

import { retryAfter } from "./errors.js";

export interface RetryOptions {
  /** Every try counts (1 = never retry). Default 4. */
  attempts?: number;
  /** First backoff without a `Retry-After`; doubles per try. Default 250. */
  backoffMs?: number;
  /** Backoff ceiling. Default 8000. */
  maxBackoffMs?: number;
  /** An answer asking to wait longer than this is raised at once. Default 60000. */
  maxRetryAfterMs?: number;
  /** Statuses retried. Default 429 and 503. */
  statuses?: readonly number[];
}

/** What the policy needs to know about a call. */
export interface Retryable {
  /** Safe to send again after a broken connection (reads, PUT/DELETE, writes the service deduplicates). */
  repeatable: boolean;
  /** Non-2xx statuses whose body is still the answer (`/readyz`'s 503), never retried. */
  accept?: readonly number[];
}

/** Answers given before any work, whatever the request: any 429, and a 503 `overloaded`. */
export function refusedBeforeWork(status: number, code: string | null): boolean {
  return status === 429 || (status === 503 && code === "overloaded");
}

/** A write's 409 while the first request under its `Idempotency-Key` still runs: a retry gets that one's answer. */
const IN_PROGRESS = "idempotency_in_progress";

/** Errors of a connection that was never made (nothing was sent): name resolution, refused, unreachable. */
const NOT_CONNECTED: ReadonlySet<string> = new Set([
  "ECONNREFUSED", "ENOTFOUND", "EAI_AGAIN", "EHOSTUNREACH", "ENETUNREACH", "UND_ERR_CONNECT_TIMEOUT",
]);

/** Whether `error` (what `fetch` threw) says the connection was never made, so the request was never sent. */
export function neverSent(error: unknown): boolean {
  for (let e: unknown = error, depth = 0; e instanceof Error && depth < 4; e = e.cause, depth++) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === "string" && NOT_CONNECTED.has(code)) return true;
  }
  return false;
}

/**
 * Retries of 429 and 503 answers (and of broken connections for repeatable calls), and of a write's 409
 * `idempotency_in_progress` (its key's first request is still running: the retry gets its answer).
 *
 * The wait is the answer's `Retry-After` when it has one (an answer asking for more than
 * `maxRetryAfterMs` is raised at once), otherwise exponential backoff from `backoffMs` up to
 * `maxBackoffMs`, with jitter. A call that is not repeatable (`undoEvent`) is tried again
 * only when the service did none of it: after a refusal (a 429, a 503 `overloaded`), or when the
 * connection was never made.
 */
export class RetryPolicy {
  readonly attempts: number;
  readonly backoffMs: number;
  readonly maxBackoffMs: number;
  readonly maxRetryAfterMs: number;
  readonly statuses: ReadonlySet<number>;

  constructor(options: RetryOptions = {}) {
    this.attempts = options.attempts ?? 4;
    this.backoffMs = options.backoffMs ?? 250;
    this.maxBackoffMs = options.maxBackoffMs ?? 8000;
    this.maxRetryAfterMs = options.maxRetryAfterMs ?? 60_000;
    this.statuses = new Set(options.statuses ?? [429, 503]);
    if (!Number.isInteger(this.attempts) || this.attempts < 1) throw new RangeError("attempts must be at least 1");
  }

  /** The wait after failed try number `attempt` (1-based), without a `Retry-After`. */
  backoff(attempt: number): number {
    const ceiling = Math.min(this.maxBackoffMs, this.backoffMs * 2 ** (attempt - 1));
    return ceiling / 2 + Math.random() * (ceiling / 2);
  }

  /**
   * Milliseconds to wait before trying the call again, or null to stop here. `code` is the error
   * answer's `code` (what tells a 503 `overloaded`, which did nothing, from another 503, which may
   * come after a write was made).
   */
  afterResponse(call: Retryable, response: Response, attempt: number, code: string | null = null): number | null {
    if (attempt >= this.attempts) return null;
    if (response.status === 409 && code === IN_PROGRESS) return this.backoff(attempt);
    if (!this.statuses.has(response.status)) return null;
    if (call.accept?.includes(response.status)) return null;
    if (!call.repeatable && !refusedBeforeWork(response.status, code)) return null;
    const seconds = retryAfter(response.headers);
    if (seconds === null) return this.backoff(attempt);
    const wait = seconds * 1000;
    return wait <= this.maxRetryAfterMs ? wait : null;
  }

  /** Whether `afterResponse` needs the error answer's `code` to decide about an answer of `status`. */
  needsCode(call: Retryable, status: number): boolean {
    return status === 409 || (!call.repeatable && this.statuses.has(status));
  }

  /** Milliseconds to wait before trying the call again after no answer (`error`: what fetch threw), or null. */
  afterTransportError(call: Retryable, attempt: number, error?: unknown): number | null {
    if (attempt >= this.attempts) return null;
    if (!call.repeatable && !neverSent(error)) return null;
    return this.backoff(attempt);
  }
}
