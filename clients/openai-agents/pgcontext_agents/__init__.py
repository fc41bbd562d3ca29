"""OpenAI Agents SDK over pgcontext: ``PgcontextSession`` (a conversation) and ``memory_tools``."""

from pgcontext_agents.session import PgcontextSession
from pgcontext_agents.tools import memory_tools

__all__ = ["PgcontextSession", "memory_tools"]
