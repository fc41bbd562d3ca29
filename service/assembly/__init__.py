"""Context assembly: budget, intent, scoring, packing and formatting of an agent's context."""
