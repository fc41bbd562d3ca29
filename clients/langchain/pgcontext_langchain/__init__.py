"""LangChain over pgcontext: ``PgcontextRetriever`` (search or assembly) and ``PgcontextChatMessageHistory``."""

from pgcontext_langchain.history import PgcontextChatMessageHistory
from pgcontext_langchain.retriever import PgcontextRetriever

__all__ = ["PgcontextChatMessageHistory", "PgcontextRetriever"]
