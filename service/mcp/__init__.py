"""The MCP server (``pgcontext mcp``): an agent's pgcontext memory as tools for a model, on the official SDK."""

from service.mcp.server import build_server, http_app, run_stdio
from service.mcp.tools import McpConfig

__all__ = ["McpConfig", "build_server", "http_app", "run_stdio"]
