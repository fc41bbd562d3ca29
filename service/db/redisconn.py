"""The one place a Redis client is built: a single server, or a Redis Cluster (redis-py's cluster client).

A cluster is asked for by the URL scheme — ``redis+cluster://host:port,host:port/`` (``rediss+cluster``
for TLS), every listed node a startup node — or by ``PGCONTEXT_REDIS_CLUSTER=true`` with a plain
``redis://host:port`` of any one node. Either way the client discovers the rest of the topology and
follows it through failovers and resharding.

Every key the service writes is hash-tagged by org (``{<org_id>}:...``), so an org's keys share one
slot: multi-key commands (``MGET`` of a hot set and its stamps), Lua scripts (the directive
compare-and-set) and pipelines work unchanged on a cluster (``tests/integration/test_redis_cluster.py``).

redis-py raises some cluster failures (no reachable node, a slot nobody serves) as
``RedisClusterException``, which is not a ``RedisError``; every fallback in the service catches
``RedisError`` (Redis is a cache), so the cluster client re-raises those as :class:`ClusterUnavailable`.
So it does with the ``AttributeError`` / ``TypeError`` / ``RuntimeError`` ("the handler is closed")
redis-py 8.1 lets out of asyncio when a node's connection is torn down under a command
(redis/redis-py#4287; the first and the last seen here while a killed master's connections were reset
during a failover): without it a directive read or a write's hot-set invalidation would answer 500.
"""

from __future__ import annotations

from typing import Any, TypeAlias
from uuid import UUID

from redis.asyncio import Redis
from redis.asyncio.cluster import ClusterNode, ClusterPipeline, RedisCluster
from redis.asyncio.connection import SSLConnection, parse_url
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialWithJitterBackoff
from redis.exceptions import ClusterCrossSlotError, RedisClusterException, RedisError
from redis.exceptions import ConnectionError as RedisConnectionError

from service.settings.redis_url import is_cluster_url, startup_nodes

RedisClient: TypeAlias = Redis | RedisCluster
"""What the service holds: both kinds answer the same commands, scripts and (non-transactional) pipelines."""



def org_prefix(org_id: UUID) -> str:
    """``{<org_id>}:``, the start of every key of the org (the braces are its hash tag)."""
    return f"{{{org_id}}}:"


async def forget_org(redis: RedisClient, org_id: UUID, *, batch: int = 500) -> int:
    """Delete every key of the org (hot sets, cached directives, bounded-cache bookkeeping, its rate
    bucket, ...); returns how many. A cluster holds them in one slot, so on one node."""
    removed = 0
    keys: list[Any] = []
    async for key in redis.scan_iter(match=org_prefix(org_id) + "*", count=batch):
        keys.append(key)
        if len(keys) >= batch:
            removed += int(await redis.delete(*keys))
            keys = []
    if keys:
        removed += int(await redis.delete(*keys))
    return removed


HEALTH_CHECK_INTERVAL_S = 30
CLUSTER_RETRIES = 3
"""Attempts after a connection error / CLUSTERDOWN, each after re-reading the topology. redis-py's
default (10, and a 0.25 s pause per pipeline retry) would hold a write's hot-set invalidation for
seconds during a failover; the reads have their own short deadlines anyway."""


class ClusterUnavailable(RedisConnectionError):
    """A cluster-level failure (no reachable node, a slot no node serves) as a ``RedisError``."""


_LEAKED = (AttributeError, TypeError, RuntimeError)
"""What redis-py's async connections raise when their transport was closed under them (see above)."""


def as_redis_error(exc: Exception) -> RedisError:
    message = str(exc)
    if isinstance(exc, _LEAKED):
        return ClusterUnavailable(f"connection torn down mid-command: {exc!r}")
    # Keys of one command in several slots is a bug (every key is tagged by org), not an outage: keep it
    # recognisable; it is still a RedisError, so the request degrades instead of failing.
    if "same" in message and "slot" in message:
        return ClusterCrossSlotError(message)
    return ClusterUnavailable(message)


class _Pipeline(ClusterPipeline):
    async def execute(self, raise_on_error: bool = True, allow_redirections: bool = True) -> list[Any]:
        try:
            return await super().execute(raise_on_error, allow_redirections)
        except (RedisClusterException, *_LEAKED) as exc:
            raise as_redis_error(exc) from exc


class Cluster(RedisCluster):
    """redis-py's async cluster client whose cluster failures are ``RedisError`` like any other."""

    async def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await super().execute_command(*args, **kwargs)
        except (RedisClusterException, *_LEAKED) as exc:
            raise as_redis_error(exc) from exc

    def pipeline(self, transaction: Any | None = None, shard_hint: Any | None = None) -> ClusterPipeline:
        if shard_hint:
            raise RedisClusterException("shard_hint is not supported by the cluster pipeline")
        return _Pipeline(self, transaction)  # type: ignore[abstract]  # redis-py builds its own the same way


def connect(url: str, *, cluster: bool = False, timeout_s: float) -> RedisClient:
    """The service's Redis client for ``url``: a cluster client when ``cluster`` or the scheme says so.

    Connections are made lazily (at the first command), so building a client never blocks or fails on
    an unreachable server; ``timeout_s`` bounds every socket read and connect (Redis is a cache)."""
    # No ``CLIENT SETINFO`` on connect: one round trip less per connection, and on servers before
    # 7.2 its refusal, which redis-py swallows, left a reference cycle per connection.
    common: dict[str, Any] = {"socket_timeout": timeout_s, "socket_connect_timeout": timeout_s,
                              "health_check_interval": HEALTH_CHECK_INTERVAL_S, "driver_info": None}
    if not (cluster or is_cluster_url(url)):
        return Redis.from_url(url, **common)
    nodes, first = startup_nodes(url)
    options: dict[str, Any] = dict(parse_url(first))  # credentials, TLS and query options of the URL
    options.pop("host", None)
    options.pop("port", None)
    if options.pop("connection_class", None) is SSLConnection:
        options["ssl"] = True
    return Cluster(startup_nodes=[ClusterNode(host, port) for host, port in nodes], **{**common, **options},
                   retry=Retry(ExponentialWithJitterBackoff(base=0.01, cap=0.1), retries=CLUSTER_RETRIES))
