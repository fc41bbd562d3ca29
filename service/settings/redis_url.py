"""Redis URLs as the service reads them: one server, or a Redis Cluster's startup nodes.

A cluster is asked for by the URL scheme (``redis+cluster://host:port,host:port/``, ``rediss+cluster``
for TLS) or by ``PGCONTEXT_REDIS_CLUSTER=true`` with a plain ``redis://host:port`` of any one node
(:mod:`service.db.redisconn` builds the client). Checked when settings are read, not at the first request.
"""

from __future__ import annotations

from urllib.parse import unquote, urlsplit, urlunsplit

CLUSTER_SCHEMES = {"redis+cluster": "redis", "rediss+cluster": "rediss"}


def is_cluster_url(url: str) -> bool:
    return urlsplit(url).scheme.lower() in CLUSTER_SCHEMES


def startup_nodes(url: str) -> tuple[list[tuple[str, int]], str]:
    """The ``(host, port)`` of every node in a cluster URL, and the URL of the first as plain ``redis(s)://``
    (credentials and query options kept) for redis-py's own parsing."""
    parts = urlsplit(url)
    scheme = CLUSTER_SCHEMES.get(parts.scheme.lower(), parts.scheme.lower())
    if scheme not in ("redis", "rediss"):
        raise ValueError(f"a Redis Cluster is reached over TCP (redis:// or rediss://), not {parts.scheme}://")
    userinfo, _, hosts = parts.netloc.rpartition("@")
    nodes: list[tuple[str, int]] = []
    for item in hosts.split(","):
        host, sep, port = item.strip().rpartition(":")
        if not sep:
            host, port = item.strip(), "6379"
        host = host.strip("[]")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"bad cluster node {item!r} in the Redis URL (expected host:port)")
        nodes.append((unquote(host), int(port)))
    if parts.path not in ("", "/", "/0"):
        raise ValueError("a Redis Cluster has only database 0")
    first_host, first_port = nodes[0]
    netloc = (f"{userinfo}@" if userinfo else "") + (f"[{first_host}]" if ":" in first_host else first_host)
    return nodes, urlunsplit((scheme, f"{netloc}:{first_port}", "", parts.query, ""))


def check_url(url: str, *, cluster: bool) -> None:
    """Raise ValueError for a URL the client could not use (at start, not at the first request)."""
    if cluster or is_cluster_url(url):
        startup_nodes(url)
