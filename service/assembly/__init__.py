"""Context assembly: budget, intent, scoring, packing and formatting of an agent's context, the
orchestrator that runs its branches under one deadline, the hot set, feedback and their HTTP API."""

from service.assembly.deadline import CallerDeadline
from service.assembly.handlers import AssemblyController, FeedbackController, HotMemoryController, orchestrator_of
from service.assembly.orchestrator import Orchestrator
from service.assembly.wiring import build_orchestrator

__all__ = [
    "AssemblyController",
    "CallerDeadline",
    "FeedbackController",
    "HotMemoryController",
    "Orchestrator",
    "build_orchestrator",
    "orchestrator_of",
]
