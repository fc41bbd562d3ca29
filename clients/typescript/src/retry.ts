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

/**
 * Retries of 429 and 503 answers (and of broken connections for repeatable calls).
 *
 * The wait is the answer's `Retry-After` when it has one (an answer asking for more than
 * `maxRetryAfterMs` is raised at once), otherwise exponential backoff from `backoffMs` up to
 * `maxBackoffMs`, with jitter.
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

  /** Milliseconds to wait before trying the call again, or null to stop here. */
  afterResponse(call: Retryable, response: Response, attempt: number): number | null {
    if (attempt >= this.attempts || !this.statuses.has(response.status)) return null;
    if (call.accept?.includes(response.status)) return null;
    const seconds = retryAfter(response.headers);
    if (seconds === null) return this.backoff(attempt);
    const wait = seconds * 1000;
    return wait <= this.maxRetryAfterMs ? wait : null;
  }

  afterTransportError(call: Retryable, attempt: number): number | null {
    if (attempt >= this.attempts || !call.repeatable) return null;
    return this.backoff(attempt);
  }
}
