"""Memories: the write path (validate, embed, insert, idempotency), CRUD handlers, rows in Postgres."""

from service.memories.handlers import MemoryController

__all__ = ["MemoryController"]
