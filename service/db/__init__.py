"""Database access: the pool, the org-scoped transaction, named SQL and SQLSTATE mapping."""

from service.db.pool import create_pool
from service.db.queries import query
from service.db.tenant import Database, TenantTx

__all__ = ["Database", "TenantTx", "create_pool", "query"]
