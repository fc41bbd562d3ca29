"""A LangGraph ``BaseStore`` (sync and async) backed by pgcontext: ``PgcontextStore``."""

from pgcontext_langgraph.store import IndexFields, PgcontextStore

__all__ = ["IndexFields", "PgcontextStore"]
