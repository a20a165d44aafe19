"""A lean connection (shared.resp) to the Redis Cluster node that owns one slot, following it when it moves.

Every key a lean consumer touches on a cluster is in one slot (a matcher shard's keys share a hash
tag; a gateway's events stream of one shard shares that shard's tag), so the consumer needs one
node: the slot's master. ``SlotConnection`` resolves it from redis-py's cluster client (its slot map),
and resolves it again when
- a reply redirects (MOVED: the slot has a new owner, after a failover or a resharding; ASK,
  TRYAGAIN: the slot is being migrated; CLUSTERDOWN: the cluster is mending; READONLY, UNBLOCKED:
  the node was just demoted to a replica), or
- the connection fails (the node died: redis-py's slot map is refreshed from the other nodes).
Either way the call raises ``redis.ConnectionError`` after closing the socket, so a consumer treats it
exactly as an outage: an unknown commit is retried with the applied-id check (no effect lost or
published twice), pending entries are read again first, and the next call connects to the owner.
"""

from __future__ import annotations

import logging
from typing import Any

import hiredis
from redis import exceptions as rex
from redis.cluster import RedisCluster
from redis.crc import key_slot

from shared.resp import RespConnection

log = logging.getLogger(__name__)

# Error replies that mean "not on this node, or not now": the slot moved, is moving, or the cluster
# is mending; a master turned replica (a failover) refuses writes (READONLY) and may end the blocking
# reads it was serving with UNBLOCKED rather than MOVED. Any other error reply is the caller's.
REDIRECTS = (b"MOVED", b"ASK", b"TRYAGAIN", b"CLUSTERDOWN", b"READONLY", b"UNBLOCKED")
_REDIRECT_TEXT = tuple(p.decode() for p in REDIRECTS)


def node_url(host: str, port: int) -> str:
    return f"redis://{host}:{port}"


def owner_url(r: RedisCluster, slot: int) -> str:
    """The URL of the master serving ``slot`` in redis-py's slot map."""
    node = r.nodes_manager.get_node_from_slot(slot)
    return node_url(node.host, node.port)


class SlotConnection(RespConnection):
    """A ``RespConnection`` to the master of ``key``'s slot; re-resolved after a redirect or a failure.

    Not thread-safe (one consumer loop owns it); ``r`` (redis-py's cluster client) only serves the
    slot map, and may be shared.
    """

    def __init__(self, r: RedisCluster, key: str | bytes, *, timeout_s: float = 5.0) -> None:
        self.cluster = r
        self.slot = key_slot(key.encode() if isinstance(key, str) else key)
        super().__init__(owner_url(r, self.slot), timeout_s=timeout_s)
        self._moved_to: str | None = None  # the owner a MOVED reply named
        self._stale = False  # resolve the owner again before the next connection
        self.redirects = 0

    @property
    def address(self) -> str:
        return f"{self._parsed.hostname}:{self._parsed.port}"

    def _connect(self) -> Any:
        if self._stale:
            self._resolve()
        return super()._connect()

    def _resolve(self) -> None:
        url = self._moved_to
        if url is None:
            try:
                self.cluster.nodes_manager.initialize()  # ask the nodes that answer for a fresh slot map
                url = owner_url(self.cluster, self.slot)
            except (rex.RedisError, rex.RedisClusterException) as exc:  # the latter: no node answered
                log.warning("cannot refresh the cluster's slot map (%s); trying %s again", exc, self.address)
                return  # stays stale: resolved again on the next attempt
        self._moved_to = None
        self._stale = False
        before = self.address
        RespConnection.__init__(self, url, timeout_s=self.timeout_s)
        if self.address != before:
            log.warning("slot %d is served by %s now (was %s)", self.slot, self.address, before)

    def roundtrip(self, payload: bytes, replies: int, *, timeout_s: float | None = None) -> list[Any]:
        try:
            out = super().roundtrip(payload, replies, timeout_s=timeout_s)
        except (rex.ConnectionError, rex.TimeoutError):
            self._stale = True
            raise
        for reply in out:
            if type(reply) is hiredis.ReplyError and str(reply).startswith(_REDIRECT_TEXT):
                self._redirected(str(reply))
        return out

    def _redirected(self, text: str) -> None:
        """Close (replies still owed would be misread), note where to go, and fail like an outage."""
        self.close()
        self.redirects += 1
        self._stale = True
        kind, _, rest = text.partition(" ")
        if kind == "MOVED":
            address = rest.split(" ")[-1]
            host, _, port = address.rpartition(":")
            if port.isdigit():
                self._moved_to = node_url(host or "127.0.0.1", int(port))
        raise rex.ConnectionError(f"slot {self.slot} on {self.address}: {text}")
