"""The HTTP edge: request dependencies, answers written before a handler runs, request-body checks,
the OpenAPI contract, and the health and metrics endpoints."""
