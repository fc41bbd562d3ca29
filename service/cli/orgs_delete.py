"""``pgcontext orgs delete NAME --yes``: an org and everything it holds, gone for good.

Without ``--yes`` it only says what the org holds. With it, in this order:

1. Redis must answer (else nothing is done: what the org left in Redis would outlive it);
2. every active key of the org is revoked, then the command waits the service's key cache lifetime
   (``PGCONTEXT_AUTH_CACHE_TTL_S``), so running services refuse the org's keys (401) before its data goes;
3. the org's row is deleted: every table's ``org_id`` foreign key cascades (memories and their postings,
   conversations, documents, directives, history, jobs, settings, keys, idempotency records);
4. its partial HNSW index, if ``pgcontext maintain`` built one, is dropped;
5. every Redis key of the org (``{<org id>}:*``: hot sets, cached directives, its rate bucket) is deleted.

Run it as the owner role, like the other ``orgs`` commands, beside running services or not.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from uuid import UUID

import asyncpg
from redis.exceptions import RedisError

from service.auth import admin
from service.cli import servers
from service.db.queries import query
from service.db.redisconn import connect, forget_org, org_prefix
from service.retrieval.maintenance import index_name
from service.settings import Settings

REDIS_TIMEOUT_S = 5.0
"""The command's Redis socket timeout (a scan of a big org is not a request's cache read)."""


async def _lookup(dsn: str, name: str) -> tuple[UUID, admin.OrgContents]:
    async def read(conn: asyncpg.Connection) -> tuple[UUID, admin.OrgContents]:
        org_id = await admin.org_id_by_name(conn, name)
        return org_id, await admin.org_contents(conn, org_id)

    found = await servers.with_owner(dsn, read)
    assert isinstance(found, tuple)
    return found


async def _delete(settings: Settings, dsn: str, redis_url: str, org_id: UUID) -> tuple[int, int]:
    """Steps 1-5 of the module docstring; returns (keys revoked, Redis keys deleted)."""
    redis = connect(redis_url, cluster=settings.redis.cluster, timeout_s=REDIS_TIMEOUT_S)
    try:
        try:
            await redis.ping()
        except RedisError as exc:
            raise admin.AdminError(f"Redis does not answer ({exc}): nothing was deleted") from exc
        conn = await asyncpg.connect(dsn)
        try:
            revoked = await admin.revoke_org_keys(conn, org_id)
            wait_s = settings.server.auth_cache_ttl_s
            if wait_s > 0:
                print(f"revoked {revoked} key(s); waiting {wait_s:g} s for running services to forget them",
                      file=sys.stderr)
                await asyncio.sleep(wait_s)
            if not await admin.delete_org(conn, org_id):
                raise admin.AdminError(f"org {org_id} was deleted meanwhile")
            await conn.execute(str(await conn.fetchval(query("maintenance.drop_partial_hnsw"), index_name(org_id))))
        finally:
            await conn.close()
        try:
            forgotten = await forget_org(redis, org_id)
        except RedisError as exc:
            raise admin.AdminError(f"the org is deleted, but its Redis keys could not be: delete the keys "
                                   f"matching {org_prefix(org_id)}* ({exc})") from exc
        return revoked, forgotten
    finally:
        await redis.aclose()


def cmd_orgs_delete(settings: Settings, args: argparse.Namespace) -> int:
    with servers.owner_dsn(settings) as dsn:
        org_id, contents = asyncio.run(_lookup(dsn, args.name))
        if not args.yes:
            print(f"org {args.name!r} ({org_id}) holds {contents.summary()}")
            print("nothing was deleted: run again with --yes to delete the org and everything it holds",
                  file=sys.stderr)
            return 2
        with servers.redis_url(settings) as redis_url:
            _, forgotten = asyncio.run(_delete(settings, dsn, redis_url, org_id))
    print(f"deleted org {args.name!r} ({org_id}): {contents.summary()}; {forgotten} Redis key(s)")
    return 0
