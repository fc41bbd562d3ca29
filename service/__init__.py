"""pgcontext: a PostgreSQL-centric context service for LLM agents."""

__version__ = "0.1.0"
