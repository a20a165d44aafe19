"""Tell nobody about a write until a Redis Cluster replica holds it (FIXLAB_REDIS_WAIT_REPLICAS).

A cluster replicates asynchronously: a master acknowledges a write before its replica has it, and
when that master dies and the replica is promoted, whatever it had not yet sent is gone (Redis's
cluster spec says so). WAIT closes the window for what is told to someone outside Redis: it blocks
until the replicas acknowledged every write the *same connection* made before it. Two places use it:

- the gateway's events thread: after an XREADGROUP that delivered entries (which is itself a write
  propagated after the matcher's earlier commit on that node: it moves the group's last id and the
  pending list), WAIT before sending that batch's ExecutionReports;
- the intake's writes on a cluster (services.gateway.slots): a batch is done only once WAIT confirmed it.

WAIT is per connection: it waits for the replication offset of that connection's last write. A
blocking XREADGROUP served by another client's XADD does not set it (measured on Redis 7.0: WAIT then
returned at once with the replica stopped), so just before each WAIT the same connection writes a probe
key in the stream's slot (``streams.replica_probe_key``), in one round trip with the WAIT: the offset
then covers everything the node did before. redis-py's cluster client takes any pooled connection (and
sends WAIT to every master), so ``NodePin`` keeps a plain client of its own, used by one thread, on the
node serving one slot.

The count is strict: a master with fewer connected replicas than asked (its replica died, or was just
promoted in place of a dead master) confirms nothing, and what it holds is not told until a replica
is back (the old master restarted joins as one). Accepting the replicas it has would reopen the
window: a replica that lost its link a moment can still be promoted (cluster-replica-validity-factor)
with the writes it missed. Run two replicas per master and wait for one to ride out one lost node.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

import redis
from redis.cluster import RedisCluster
from redis.exceptions import ClusterDownError, MovedError, ReadOnlyError, TryAgainError

from shared import streams

log = logging.getLogger(__name__)

# What a cluster says while a slot changes owner (a node just demoted to replica refuses writes:
# READONLY): back off and follow it, as after a lost connection.
FAILOVER_ERRORS = (MovedError, ClusterDownError, TryAgainError, ReadOnlyError)
WAIT_TIMEOUT_MS = 500  # one WAIT; the caller retries (and may stop) between them


class NotMaster(redis.ConnectionError):
    """The pinned node no longer serves the slot as a master (it was failed over)."""


class NodePin:
    """A plain connection to the master serving ``key``'s slot, found again after a failover."""

    def __init__(self, cluster: RedisCluster, key: str, replicas: int, *, timeout_s: float = 5.0) -> None:
        self.cluster = cluster
        self.key = key
        self.probe = streams.replica_probe_key(key)
        self.replicas = replicas
        self.timeout_s = timeout_s
        self._client: redis.Redis | None = None
        self.address = ""

    def client(self) -> redis.Redis:
        if self._client is None:
            node = self.cluster.get_node_from_key(self.key)
            self._connect(node.host, node.port)
        assert self._client is not None
        return self._client

    def _connect(self, host: str, port: int) -> None:
        self._client = redis.Redis(host=host, port=port, socket_timeout=self.timeout_s,
                                   socket_connect_timeout=self.timeout_s, single_connection_client=True)
        self.address = f"{host}:{port}"

    def reset(self, exc: BaseException | None = None) -> None:
        """Forget the node (it failed, or moved the slot): follow a MOVED reply to the node it names
        (a node just restarted may still hand out its old view of the slots), else ask the cluster."""
        if self._client is not None:
            with contextlib.suppress(redis.RedisError):
                self._client.close()
            self._client = None
        if isinstance(exc, MovedError):
            self._connect(exc.host, int(exc.port))
            return
        try:
            self.cluster.nodes_manager.initialize()
        except redis.RedisError as err:  # the cluster is still electing: the next call tries again
            log.warning("cannot refresh the cluster's slots yet: %s", err)

    def confirmed(self, timeout_ms: int = WAIT_TIMEOUT_MS) -> bool:
        """WAIT for the replicas to hold everything the node did so far; True when enough do."""
        c = self.client()
        pipe = c.pipeline(transaction=False)
        pipe.set(self.probe, b"1", px=60_000)
        pipe.execute_command("WAIT", self.replicas, timeout_ms)
        got = int(pipe.execute()[1])
        if got >= self.replicas:
            return True
        role: Any = c.execute_command("ROLE")
        if role[0] != b"master":
            raise NotMaster(f"{self.address} is a {role[0].decode()} now")
        return False


def pin_for(r: Any, key: str, replicas: int) -> NodePin | None:
    """A ``NodePin`` when ``r`` is a cluster client and replicas are asked for; None otherwise."""
    if replicas <= 0 or not isinstance(r, RedisCluster):
        return None
    return NodePin(r, key, replicas)
