/**
 * Typed errors: every error answer of the service becomes a `PgcontextError` subclass, the same classes
 * as the Python client (`pgcontext_client.errors`).
 *
 * The service answers every error as `{"error": {"code", "message", "details", "request_id"}}`; the
 * error carries those four plus the HTTP status and, for 429/503, `Retry-After`. Pick the class by
 * status (`err instanceof NotFound`) or look at `code` for the finer reason (`"unknown_model"`,
 * `"export_in_progress"`, `"search_unavailable"`, ...).
 */

export interface ErrorFields {
  status?: number;
  code?: string;
  details?: Record<string, unknown> | null;
  requestId?: string | null;
  retryAfterS?: number | null;
  cause?: unknown;
}

/** An error answer from the service (or, as `TransportError`, no answer at all). */
export class PgcontextError extends Error {
  static readonly status: number = 0;
  readonly status: number;
  readonly code: string;
  readonly details: Record<string, unknown>;
  readonly requestId: string | null;
  /** `Retry-After` of a 429/503 answer, in seconds. */
  readonly retryAfterS: number | null;

  constructor(message: string, fields: ErrorFields = {}) {
    super(message, fields.cause === undefined ? undefined : { cause: fields.cause });
    this.name = new.target.name;
    this.status = fields.status ?? (new.target as typeof PgcontextError).status;
    this.code = fields.code ?? "error";
    this.details = fields.details ?? {};
    this.requestId = fields.requestId ?? null;
    this.retryAfterS = fields.retryAfterS ?? null;
  }

  override toString(): string {
    const rid = this.requestId ? `, request_id=${this.requestId}` : "";
    return `${this.status} ${this.code}: ${this.message}${rid}`;
  }
}

export class BadRequest extends PgcontextError {
  static override readonly status: number = 400;
}

/** 400 `validation_error`: the request body or a parameter is not valid (`details` says where). */
export class ValidationError extends BadRequest {}

/** 401: no API key, or a key that is unknown or revoked. */
export class Unauthorized extends PgcontextError {
  static override readonly status: number = 401;
}

export class Forbidden extends PgcontextError {
  static override readonly status: number = 403;
}

/** 404: no such object in your org (another org's objects answer 404 too). */
export class NotFound extends PgcontextError {
  static override readonly status: number = 404;
}

/** 409: e.g. an `Idempotency-Key` reused with another body. */
export class Conflict extends PgcontextError {
  static override readonly status: number = 409;
}

export class PayloadTooLarge extends PgcontextError {
  static override readonly status: number = 413;
}

export class Unprocessable extends PgcontextError {
  static override readonly status: number = 422;
}

/** 429: too many requests of this kind right now (e.g. `export_in_progress`); see `retryAfterS`. */
export class RateLimited extends PgcontextError {
  static override readonly status: number = 429;
}

/** 500 and other unexpected 5xx answers. */
export class ServerError extends PgcontextError {
  static override readonly status: number = 500;
}

/** 503: a dependency is down (`redis_unavailable`, `search_unavailable`, ...). */
export class ServiceUnavailable extends PgcontextError {
  static override readonly status: number = 503;
}

/** 503 `overloaded`: the service is shedding load; retry after `retryAfterS`. */
export class Overloaded extends ServiceUnavailable {}

/** 504: the caller's deadline passed (assembly never returns partial context). */
export class DeadlineExceeded extends PgcontextError {
  static override readonly status: number = 504;
}

/** The service could not be reached or the connection broke (the fetch error is the `cause`). */
export class TransportError extends PgcontextError {
  constructor(message: string, cause?: unknown) {
    super(message, { status: 0, code: "transport_error", cause });
  }
}

/**
 * An export stream that stopped before its `end` line, so the lines read are not the whole export: the
 * service's `error` line (`code` `export_failed`: reading failed part-way) or a stream that ended
 * without one, or with a line cut short (`export_incomplete`, e.g. a proxy cut it). Run the export again.
 */
export class IncompleteExport extends PgcontextError {
  constructor(message: string, fields: { code: string; requestId?: string | null; cause?: unknown }) {
    super(message, { status: 0, ...fields });
  }
}

type ErrorClass = new (message: string, fields: ErrorFields) => PgcontextError;

const BY_STATUS: ReadonlyMap<number, ErrorClass> = new Map<number, ErrorClass>([
  [400, BadRequest], [401, Unauthorized], [403, Forbidden], [404, NotFound], [409, Conflict],
  [413, PayloadTooLarge], [422, Unprocessable], [429, RateLimited], [503, ServiceUnavailable],
  [504, DeadlineExceeded],
]);
const BY_CODE: ReadonlyMap<string, ErrorClass> = new Map<string, ErrorClass>([
  ["400 validation_error", ValidationError],
  ["503 overloaded", Overloaded],
]);

/**
 * `Retry-After` in seconds: its delta-seconds form (what the service sends) or an HTTP date (what a proxy
 * or load balancer may send), a date in the past being 0. Null when absent or unreadable.
 */
export function retryAfter(headers: Headers, now: number = Date.now()): number | null {
  const value = headers.get("retry-after")?.trim();
  if (!value) return null;
  if (/^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/.test(value)) return Math.max(0, Number(value));
  // An HTTP date names its zone (GMT); anything else is not one.
  if (!/\b(GMT|UTC)$/i.test(value)) return null;
  const when = Date.parse(value);
  return Number.isNaN(when) ? null : Math.max(0, (when - now) / 1000);
}

interface Envelope {
  code: string;
  message: string;
  details: Record<string, unknown> | null;
  requestId: string | null;
}

function envelope(text: string): Envelope | null {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    return null;
  }
  const error = (parsed as { error?: unknown } | null)?.error;
  if (typeof error !== "object" || error === null) return null;
  const { code, message, details, request_id: requestId } = error as Record<string, unknown>;
  return {
    code: typeof code === "string" ? code : "error",
    message: typeof message === "string" ? message : "",
    details: typeof details === "object" && details !== null ? (details as Record<string, unknown>) : null,
    requestId: typeof requestId === "string" ? requestId : null,
  };
}

/** The error for an error answer, whatever its body (a proxy's HTML page still gives a typed error). */
export function fromResponse(response: Response, text: string): PgcontextError {
  const status = response.status;
  const body = envelope(text) ?? {
    code: `http_${status}`, message: text.slice(0, 200) || response.statusText, details: null, requestId: null,
  };
  const cls = BY_CODE.get(`${status} ${body.code}`) ?? BY_STATUS.get(status)
    ?? (status >= 500 ? ServerError : PgcontextError);
  return new cls(body.message, {
    status, code: body.code, details: body.details,
    requestId: body.requestId ?? response.headers.get("x-request-id"),
    retryAfterS: retryAfter(response.headers),
  });
}
