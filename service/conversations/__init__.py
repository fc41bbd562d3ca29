"""Conversations: messages appended in order, stored as memories of kind ``message`` with their
speaker, session and position as columns, each searchable with a context derived from the turns before it."""

from service.conversations.handlers import ConversationController

__all__ = ["ConversationController"]
