"""Alembic migrations (env.py, script.py.mako, versions/); installed as ``service._migrations``."""
