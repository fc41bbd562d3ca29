"""Which Redis client a URL and PGCONTEXT_REDIS_CLUSTER give, and cluster URLs refused at start."""

from __future__ import annotations

import pytest
from redis.asyncio import Redis
from redis.exceptions import ClusterCrossSlotError, RedisClusterException

from service.db.redisconn import Cluster, ClusterUnavailable, as_redis_error, connect
from service.settings import SettingsError, load_settings
from service.settings.redis_url import startup_nodes


def test_cluster_url_lists_every_node_and_keeps_credentials_and_options() -> None:
    nodes, first = startup_nodes("redis+cluster://user:p%40ss@10.0.0.1:7000,10.0.0.2:7001,[::1]:7002/?ssl_cert_reqs=none")
    assert nodes == [("10.0.0.1", 7000), ("10.0.0.2", 7001), ("::1", 7002)]
    assert first == "redis://user:p%40ss@10.0.0.1:7000?ssl_cert_reqs=none"
    assert startup_nodes("rediss+cluster://cache.internal")[0] == [("cache.internal", 6379)]
    assert startup_nodes("rediss+cluster://cache.internal")[1].startswith("rediss://")


@pytest.mark.parametrize("url", ["redis+cluster://h:notaport", "redis+cluster://h:1/3", "unix:///tmp/r.sock",
                                 "redis+cluster://h:1,:2"])
def test_unusable_cluster_urls_are_refused(url: str) -> None:
    with pytest.raises(ValueError):
        startup_nodes(url)


async def test_the_scheme_or_the_setting_picks_the_cluster_client() -> None:
    plain = connect("redis://127.0.0.1:1/0", timeout_s=0.1)
    by_scheme = connect("redis+cluster://127.0.0.1:1,127.0.0.1:2", timeout_s=0.1)
    by_setting = connect("redis://127.0.0.1:1", cluster=True, timeout_s=0.1)
    try:
        assert isinstance(plain, Redis) and not isinstance(plain, Cluster)
        assert isinstance(by_scheme, Cluster) and isinstance(by_setting, Cluster)
        assert [n.name for n in by_scheme.startup_nodes] == ["127.0.0.1:1", "127.0.0.1:2"]
    finally:
        for client in (plain, by_scheme, by_setting):
            await client.aclose()


def test_settings_refuse_a_cluster_without_a_url_or_with_a_socket() -> None:
    assert load_settings({"PGCONTEXT_REDIS_URL": "redis://h:7000", "PGCONTEXT_REDIS_CLUSTER": "yes"}).redis.cluster
    with pytest.raises(SettingsError, match="PGCONTEXT_REDIS_URL"):
        load_settings({"PGCONTEXT_REDIS_CLUSTER": "true"})
    with pytest.raises(SettingsError, match="TCP"):
        load_settings({"PGCONTEXT_REDIS_URL": "unix:///tmp/r.sock", "PGCONTEXT_REDIS_CLUSTER": "true"})
    assert not load_settings({"PGCONTEXT_REDIS_URL": "unix:///tmp/r.sock"}).redis.cluster


def test_cluster_failures_outside_redis_error_become_redis_errors() -> None:
    """Every cache fallback catches RedisError: what redis-py raises otherwise must become one."""
    assert isinstance(as_redis_error(RedisClusterException("Redis Cluster cannot be connected")), ClusterUnavailable)
    assert isinstance(as_redis_error(AttributeError("'NoneType' object has no attribute 'writelines'")),
                      ClusterUnavailable)
    assert isinstance(as_redis_error(RuntimeError("unable to perform operation on <TCPTransport closed=True>")),
                      ClusterUnavailable)
    assert isinstance(as_redis_error(RedisClusterException("MGET - all keys must map to the same key slot")),
                      ClusterCrossSlotError)
