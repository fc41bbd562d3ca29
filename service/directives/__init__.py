"""Directives: per-agent system instructions in Postgres behind a versioned Redis envelope."""

from service.directives.handlers import DirectiveController
from service.directives.store import DirectiveStore

__all__ = ["DirectiveController", "DirectiveStore"]
