"""Data-subject export: an agent's memories, directive and documents as a streamed NDJSON document."""

from service.export.handlers import ExportController, ImportController

__all__ = ["ExportController", "ImportController"]
