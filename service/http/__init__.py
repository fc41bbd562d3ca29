"""The HTTP edge: request dependencies (the bearer key -> org), answers written before a handler runs
(rate limits, overload), request-body checks, the error responses and the OpenAPI contract, and the
health and metrics endpoints."""
