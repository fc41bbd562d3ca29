"""Operator commands: ``pgcontext serve | migrate | orgs | keys | config | import | maintain | mcp``,
the reports they print and serve's worker processes."""
