export { Client } from "./client.js";
export type { AssembleOptions, ClientOptions, Feedback, MemoryFields, SearchOptions } from "./client.js";
export {
  BadRequest,
  Conflict,
  DeadlineExceeded,
  Forbidden,
  fromResponse,
  IncompleteExport,
  NotFound,
  Overloaded,
  PayloadTooLarge,
  PgcontextError,
  RateLimited,
  ServerError,
  ServiceUnavailable,
  TransportError,
  Unauthorized,
  Unprocessable,
  ValidationError,
} from "./errors.js";
export type { ErrorFields } from "./errors.js";
export { VERSION } from "./http.js";
export type { RequestOptions } from "./http.js";
export { RetryPolicy } from "./retry.js";
export type { RetryOptions } from "./retry.js";
export type * from "./types.js";
export type { components, operations, paths } from "./schema.js";
