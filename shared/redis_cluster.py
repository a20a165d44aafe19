"""Start and stop a private Redis Cluster: N masters (and optional replicas) on free loopback ports.

For ``make run-cluster`` and the test fixtures: real redis-server processes in cluster mode, joined by
``redis-cli --cluster create`` (Redis's own tool, rather than assigning slots by hand), each in its own
folder under ``workdir`` (nodes.conf, AOF, log). Nothing here is used by the single-Redis path.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

import redis
import redis.asyncio as aioredis
from redis.asyncio.cluster import ClusterNode as _AsyncNode
from redis.cluster import ClusterNode as _RedisNode
from redis.cluster import RedisCluster

from shared import lifeline
from shared.redis_server import free_port


def cluster_port(taken: set[int]) -> int:
    """A free port whose cluster bus port (port + 10000) is free and valid too; both go into ``taken``."""
    while True:
        port = free_port()
        if port + 10000 > 65535 or port in taken or port + 10000 in taken:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        taken.update((port, port + 10000))
        return port


class ClusterError(RuntimeError):
    """The cluster could not be started (a node died, the create step failed, or it never became ok)."""


@dataclass
class ClusterNode:
    port: int
    workdir: Path
    proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def log_tail(self, n: int = 2000) -> str:
        path = self.workdir / "redis.log"
        return path.read_text(errors="replace")[-n:] if path.exists() else "(no log)"


@dataclass
class LocalCluster:
    """``masters`` masters, each with ``replicas`` replicas. ``url`` names every master (a comma list)."""

    workdir: Path
    masters: int = 3
    replicas: int = 0
    appendonly: bool = False
    appendfsync: str = "everysec"  # make run-cluster passes FIXLAB_REDIS_APPENDFSYNC (default always)
    die_with_parent: bool = False
    node_timeout_ms: int = 2000  # cluster-node-timeout: how soon a dead master's replica takes over
    nodes: list[ClusterNode] = field(default_factory=list)

    @property
    def url(self) -> str:
        """REDIS_URL for the services: every master's address, comma separated (any one is enough)."""
        return ",".join(f"redis://{n.address}/0" for n in self.nodes[: self.masters])

    @property
    def first_port(self) -> int:
        return self.nodes[0].port

    def start(self, timeout_s: float = 30.0) -> LocalCluster:
        server = shutil.which("redis-server")
        cli = shutil.which("redis-cli")
        if server is None or cli is None:
            raise ClusterError("redis-server and redis-cli are needed (make system-deps installs them)")
        total = self.masters * (1 + self.replicas)
        if self.masters < 3:
            raise ClusterError("redis-cli --cluster create needs at least 3 masters")
        self.nodes = []
        taken: set[int] = set()
        for _ in range(total):
            port = cluster_port(taken)
            node = ClusterNode(port, self.workdir / f"node-{port}")
            node.workdir.mkdir(parents=True, exist_ok=True)
            self._spawn(server, node)
            self.nodes.append(node)
        try:
            deadline = time.monotonic() + timeout_s
            for node in self.nodes:
                self._wait_ping(node, deadline)
            create = [cli, "--cluster", "create", *(n.address for n in self.nodes),
                      "--cluster-replicas", str(self.replicas), "--cluster-yes"]
            done = subprocess.run(create, capture_output=True, text=True, timeout=timeout_s, check=False)
            if done.returncode != 0:
                raise ClusterError(f"redis-cli --cluster create failed: {done.stdout[-1500:]} "
                                   f"{done.stderr[-500:]}")
            self._wait_ok(deadline)
        except BaseException:
            self.stop()
            raise
        return self

    def _spawn(self, server: str, node: ClusterNode) -> None:
        args = [server, "--port", str(node.port), "--bind", "127.0.0.1", "--dir", str(node.workdir),
                "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                "--cluster-node-timeout", str(self.node_timeout_ms), "--save", "",
                "--appendonly", "yes" if self.appendonly else "no", "--appendfsync", self.appendfsync,
                "--protected-mode", "yes", "--daemonize", "no",
                "--logfile", str(node.workdir / "redis.log")]
        lifeline_fn = lifeline.die_with_parent() if self.die_with_parent else None
        node.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     stdin=subprocess.DEVNULL, start_new_session=True,
                                     preexec_fn=lifeline_fn)

    def restart(self, port: int, timeout_s: float = 30.0) -> None:
        """Start a killed node again on its port and folder: it rejoins the cluster from its
        nodes.conf (a master that was failed over comes back as its successor's replica)."""
        server = shutil.which("redis-server")
        assert server is not None
        node = next(n for n in self.nodes if n.port == port)
        if node.proc is None:
            self._spawn(server, node)
            self._wait_ping(node, time.monotonic() + timeout_s)

    def _wait_ping(self, node: ClusterNode, deadline: float) -> None:
        client = redis.Redis(host="127.0.0.1", port=node.port, socket_timeout=1)
        try:
            while True:
                if node.proc is not None and node.proc.poll() is not None:
                    raise ClusterError(f"redis-server on {node.port} exited: {node.log_tail()}")
                try:
                    client.ping()
                    return
                except (redis.ConnectionError, redis.BusyLoadingError):
                    if time.monotonic() > deadline:
                        raise ClusterError(f"redis-server on {node.port} did not answer") from None
                    time.sleep(0.02)
        finally:
            client.close()

    def _wait_ok(self, deadline: float) -> None:
        """Every node says cluster_state:ok and knows all the others."""
        clients = [redis.Redis(host="127.0.0.1", port=n.port, socket_timeout=1) for n in self.nodes]
        try:
            while True:
                states = []
                for c in clients:
                    info = c.execute_command("CLUSTER", "INFO").decode()
                    fields = dict(line.split(":", 1) for line in info.split() if ":" in line)
                    states.append(fields.get("cluster_state") == "ok"
                                  and int(fields.get("cluster_known_nodes", 0)) == len(self.nodes))
                if all(states) and all(self._replicas_online(c) for c in clients):
                    return
                if time.monotonic() > deadline:
                    raise ClusterError("the cluster did not reach cluster_state:ok on every node")
                time.sleep(0.1)
        finally:
            for c in clients:
                c.close()

    def _replicas_online(self, client: redis.Redis) -> bool:
        """A master has its replicas connected and in sync (a replica: true), so that a write can be
        confirmed on one (WAIT) from the start."""
        role = client.execute_command("ROLE")
        return role[0] != b"master" or len(role[2]) >= self.replicas

    def kill(self, port: int) -> None:
        """Kill -9 one node, as a crash would."""
        for node in self.nodes:
            if node.port == port and node.proc is not None:
                node.proc.kill()
                node.proc.wait()
                node.proc = None

    def stop(self) -> None:
        for node in self.nodes:
            if node.proc is not None and node.proc.poll() is None:
                node.proc.terminate()
        for node in self.nodes:
            if node.proc is not None:
                try:
                    node.proc.wait(5)
                except subprocess.TimeoutExpired:
                    node.proc.kill()
                    node.proc.wait()
                node.proc = None

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _with_scheme(node: str) -> str:
    node = node.strip()
    return node if "://" in node else f"redis://{node}"


def is_cluster_url(url: str) -> bool:
    """A comma list of nodes, or one node that runs in cluster mode (one INFO asks it; not kept, since
    a port may serve another server later)."""
    if "," in url:
        return True
    probe = redis.Redis.from_url(_with_scheme(url), socket_timeout=2, socket_connect_timeout=2)
    try:
        return bool(probe.info("cluster").get("cluster_enabled"))
    except redis.RedisError:
        return False  # unreachable or not a cluster: the caller's plain client reports it
    finally:
        probe.close()


def _nodes(url: str) -> list[tuple[str, int]]:
    out = []
    for part in url.split(","):
        parsed = urlparse(_with_scheme(part))
        out.append((parsed.hostname or "127.0.0.1", parsed.port or 6379))
    return out


def cluster_client(url: str, *, timeout_s: float = 5.0) -> RedisCluster:
    """redis-py's cluster client from a node list: ``redis://h:p/0,redis://h2:p2/0`` or ``h:p,h2:p2``."""
    nodes = [_RedisNode(host, port) for host, port in _nodes(url)]
    return RedisCluster(startup_nodes=nodes, socket_timeout=timeout_s, socket_connect_timeout=timeout_s)


def async_cluster_client(url: str, *, timeout_s: float = 5.0) -> aioredis.RedisCluster:
    """redis-py's asyncio cluster client from the same node list."""
    nodes = [_AsyncNode(host, port) for host, port in _nodes(url)]
    return aioredis.RedisCluster(startup_nodes=nodes, socket_timeout=timeout_s,
                                 socket_connect_timeout=timeout_s)


def connect_any(url: str, *, timeout_s: float = 5.0) -> redis.Redis | RedisCluster:
    """The right client for ``url``: redis-py's cluster client for a cluster, a plain one otherwise."""
    if is_cluster_url(url):
        return cluster_client(url, timeout_s=timeout_s)
    return redis.Redis.from_url(_with_scheme(url), socket_timeout=timeout_s, socket_connect_timeout=timeout_s)
