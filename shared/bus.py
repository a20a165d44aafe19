"""The bus: Redis streams carrying msgpack batches, and the one consumer loop every service uses.

The loop (``StreamConsumer.run``):
- creates its consumer group idempotently (BUSYGROUP is fine);
- after a restart, reads its own pending entries first, then new ones;
- hands a batch to the handler, which returns the effects (entries to append to other streams);
- publishes the effects and acknowledges the batch in one MULTI/EXEC, together with the id of the
  last entry applied, so a retry after an ambiguous failure (a time-out after EXEC ran) can tell
  whether the batch already went out: no effect is lost or published twice;
- bounds every stream it writes (approximate MAXLEN);
- catches Redis connection errors narrowly and backs off, never spinning.
Entries that do not decode go to the consumer's dead-letter stream with the reason, and are
acknowledged.

The same loop on a lean RESP connection (``LeanStreamConsumer``, ``LeanMultiStreamConsumer``) is in
shared.bus_lean, and on several streams of a Redis Cluster (``ClusterMultiStreamConsumer``) in
shared.bus_cluster; both build on this module. ``read_streams`` (and ``read_streams_async``) follow
several streams without a group: one XREAD on one Redis, one per stream on a Redis Cluster.

On a cluster every transaction stays in one slot: a consumer's own keys (its stream, the applied
id) share the stream's slot, and so must its output streams (a commit naming another slot is
refused); effects that may live elsewhere and need only be published at least once (a dead letter:
``Effects.elsewhere``) are sent just before the transaction.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

import redis
import redis.asyncio as aioredis
from redis.cluster import RedisCluster
from redis.crc import key_slot

from shared import redis_cluster, streams
from shared.replication import FAILOVER_ERRORS, NodePin, pin_for
from shared.schema import Message, SchemaError, decode_batch, encode_batch

log = logging.getLogger(__name__)

REDIS_ERRORS = (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError)


def connect(url: str, *, timeout_s: float = 5.0) -> redis.Redis:
    """A synchronous client; bytes in, bytes out.

    On a Redis Cluster (``url`` a comma list of nodes, or one node in cluster mode) redis-py's cluster
    client, typed as the plain one: the services give it the same single-slot commands.
    """
    if redis_cluster.is_cluster_url(url):
        return cast(redis.Redis, redis_cluster.cluster_client(url, timeout_s=timeout_s))
    return redis.Redis.from_url(
        url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s, health_check_interval=30
    )


def is_cluster(r: Any) -> bool:
    """Whether ``r`` is redis-py's (synchronous or asyncio) cluster client."""
    return isinstance(r, RedisCluster | aioredis.RedisCluster)


def ensure_group(r: redis.Redis, stream: str, group: str, start_id: str = "0") -> None:
    try:
        r.xgroup_create(stream, group, id=start_id, mkstream=True)
    except redis.ResponseError as exc:
        if "BUSYGROUP" not in str(exc):
            raise


def publish(r: redis.Redis | Any, stream: str, msgs: Sequence[Message], maxlen: int) -> Any:
    """Append one entry holding ``msgs`` (a client or a pipeline); returns what XADD returns."""
    return r.xadd(stream, {streams.BATCH_FIELD: encode_batch(msgs)}, maxlen=maxlen, approximate=True)


@dataclass(slots=True)
class Effects:
    """What a handler wants published for a batch, atomically with its acknowledgement."""

    out: dict[str, list[Message]] = field(default_factory=lambda: defaultdict(list))
    extra: list[Callable[[Any], None]] = field(default_factory=list)  # more pipeline calls
    # Pipeline calls on keys outside the consumed stream's slot (a dead letter): inside the
    # transaction on one Redis; on a cluster sent just before it (at least once).
    elsewhere: list[Callable[[Any], None]] = field(default_factory=list)

    def add(self, stream: str, msg: Message) -> None:
        self.out[stream].append(msg)


Entry = tuple[bytes, list[Message]]
Handler = Callable[[list[Entry]], Effects | None]


def _id_tuple(entry_id: bytes | str) -> tuple[int, int]:
    text = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
    ms, _, seq = text.partition("-")
    return int(ms), int(seq or 0)


def id_after(a: bytes | str, b: bytes | str) -> bool:
    """True when stream id ``a`` comes after ``b``."""
    return _id_tuple(a) > _id_tuple(b)


class WritesLost(RuntimeError):
    """Redis no longer holds an acknowledgement this consumer committed: a Redis Cluster failover
    promoted a replica that had not received it (or a Redis restarted without its last writes)."""


class StreamConsumer:
    """One consumer in a group on one stream: pending entries first, then new ones.

    ``decode_payload`` turns an entry's batch field into the handler's messages (schema messages by
    default; the matcher takes wire-form tuples, which are much cheaper to build). ``deadletter``
    is where entries that do not decode go, acknowledged in the same transaction: on a Redis
    Cluster it must share the stream's slot (a matcher passes its shard's dead-letter stream).
    """

    def __init__(self, r: redis.Redis, stream: str, group: str, name: str, *, count: int = 500,
                 block_ms: int = 500, maxlen: int = 1_000_000, start_id: str = "0",
                 decode_payload: Callable[[bytes], list[Any]] = decode_batch,
                 deadletter: str = streams.DEADLETTER_STREAM, wait_replicas: int = 0,
                 check_lost: bool = False) -> None:
        """``wait_replicas`` (a cluster only; shared.replication): hand the handler no batch before
        that many replicas hold it (and what the stream's node wrote before it). ``check_lost`` (a
        cluster only): each read of new entries also reads the applied id, in the same round trip,
        and raises WritesLost when it is before the last one committed here (a failover the cluster
        client followed without an error lost the commit: only a consumer keeping state needs it)."""
        self.r = r
        self.decode_payload = decode_payload
        self.deadletter = deadletter
        self.stream = stream
        self.group = group
        self.name = name
        self.count = count
        self.block_ms = block_ms
        self.maxlen = maxlen
        self.start_id = start_id
        self.applied_key = streams.applied_key(stream, group)
        self._pending_first = True
        self.consumed = 0
        self.deadlettered = 0
        self.cluster = is_cluster(r)
        self.slot = key_slot(stream.encode())
        self.pin: NodePin | None = pin_for(r, stream, wait_replicas)
        self.committed: bytes | None = None  # the last id this consumer's commit went through for
        self._verify = False  # after a Redis error: is what we committed still there?
        self.check_lost = check_lost and self.cluster

    def ensure(self) -> None:
        ensure_group(self.r, self.stream, self.group, self.start_id)

    def read(self) -> list[Entry]:
        """Return the next batch: own pending entries after a (re)start, then new entries."""
        if self.pin is not None:
            return self._read_confirmed(self.pin)
        if self._pending_first:
            rows: Any = self.r.xreadgroup(self.group, self.name, {self.stream: "0"}, count=self.count)
            entries = rows[0][1] if rows else []
            if entries:
                return self._decode(entries)
            self._pending_first = False
        if self.check_lost and self.committed is not None:
            return self._read_checked(self.committed)
        rows = self.r.xreadgroup(self.group, self.name, {self.stream: ">"}, count=self.count,
                                 block=self.block_ms)
        return self._decode(rows[0][1]) if rows else []

    def _read_checked(self, committed: bytes) -> list[Entry]:
        pipe = self.r.pipeline(transaction=False)
        pipe.get(self.applied_key)
        pipe.xreadgroup(self.group, self.name, {self.stream: ">"}, count=self.count, block=self.block_ms)
        done, rows = pipe.execute()
        if done is None or id_after(committed, done):
            raise WritesLost(f"{self.applied_key} is {done!r} after {committed.decode()} was committed: "
                             f"Redis lost acknowledged writes")
        return self._decode(rows[0][1]) if rows else []

    def _read_confirmed(self, pin: NodePin) -> list[Entry]:
        """``read`` on the stream's node, then WAIT on that connection: an XREADGROUP that delivers
        entries is replicated after the writes before it, so its confirmation covers them."""
        c = pin.client()
        rows: Any = []
        if self._pending_first:
            rows = c.xreadgroup(self.group, self.name, {self.stream: "0"}, count=self.count)
            if not (rows and rows[0][1]):
                self._pending_first = False
        if not self._pending_first:
            rows = c.xreadgroup(self.group, self.name, {self.stream: ">"}, count=self.count,
                                block=self.block_ms)
        if not (rows and rows[0][1]):
            return []
        if not pin.confirmed():
            # Not yet on a replica: nothing of it is told. Read it again (pending) and WAIT again.
            raise redis.TimeoutError(f"no replica of {pin.address} confirmed {self.stream} yet")
        return self._decode(rows[0][1])

    def _decode(self, raw_entries: Iterable[tuple[bytes, dict[bytes, bytes] | None]]) -> list[Entry]:
        out: list[Entry] = []
        bad: list[tuple[bytes, str, bytes]] = []
        for entry_id, fields_ in raw_entries:
            if fields_ is None:  # trimmed away while pending
                bad.append((entry_id, "entry was trimmed before it was read", b""))
                continue
            payload = fields_.get(streams.BATCH_FIELD)
            if payload is None:
                bad.append((entry_id, "entry has no batch field", repr(fields_).encode()[:4096]))
                continue
            try:
                out.append((entry_id, self.decode_payload(payload)))
            except SchemaError as exc:
                bad.append((entry_id, str(exc), payload[:4096]))
        if bad:
            self._deadletter(bad)
        return out

    def _deadletter(self, bad: list[tuple[bytes, str, bytes]]) -> None:
        # One transaction on one Redis. On a cluster, where the dead-letter stream may live in another
        # slot, the dead letters go first and the acknowledgements after (a retry may write one twice).
        pipe = self.r.pipeline(transaction=True)
        split = self.cluster and key_slot(self.deadletter.encode()) != self.slot
        for entry_id, reason, payload in bad:
            log.error("dead-lettering %s %s: %s", self.stream, entry_id.decode(), reason)
            pipe.xadd(self.deadletter,
                      {b"stream": self.stream, b"id": entry_id, b"group": self.group,
                       b"reason": reason, b"payload": payload}, maxlen=10_000, approximate=True)
            if not split:
                pipe.xack(self.stream, self.group, entry_id)
        pipe.execute()
        if split:
            self.r.xack(self.stream, self.group, *(entry_id for entry_id, _, _ in bad))
        self.deadlettered += len(bad)

    def already_applied(self, last_id: bytes) -> bool:
        done = self.r.get(self.applied_key)
        return done is not None and not id_after(last_id, done)

    def commit(self, ids: Sequence[bytes], effects: Effects | None) -> None:
        """Publish the effects and acknowledge ``ids`` in one transaction (ids must be in order)."""
        if self.cluster and effects is not None:
            effects = self._publish_elsewhere(effects)
        pipe = self.r.pipeline(transaction=True)
        if effects is not None:
            for stream, msgs in effects.out.items():
                if msgs:
                    publish(pipe, stream, msgs, self.maxlen)
            for call in effects.extra:
                call(pipe)
            for call in effects.elsewhere:
                call(pipe)
        pipe.xack(self.stream, self.group, *ids)
        pipe.set(self.applied_key, ids[-1])
        pipe.execute()
        self.committed = ids[-1]

    def check_not_lost(self) -> None:
        """Raise WritesLost when the applied id Redis holds is before the last one committed here."""
        if self.committed is None:
            return
        done = self.r.get(self.applied_key)
        if done is None or id_after(self.committed, done):
            raise WritesLost(f"{self.applied_key} is {done!r} after {self.committed.decode()} was committed: "
                             f"Redis lost acknowledged writes")

    def _publish_elsewhere(self, effects: Effects) -> Effects:
        """On a cluster: run the ``elsewhere`` calls now, each command to its own node; return what
        stays for the transaction. An output stream of another slot stays in it, and the cluster
        refuses the commit: exactly-once publishing needs them in the stream's slot."""
        if not effects.elsewhere:
            return effects
        for call in effects.elsewhere:
            call(self.r)
        return Effects(out=effects.out, extra=effects.extra)

    def commit_retrying(self, ids: Sequence[bytes], effects: Effects | None,
                        stop: threading.Event, *, attempted: bool = False) -> bool:
        """Commit, retrying through Redis outages; False only when asked to stop first.

        ``attempted``: the commit was already sent once with an unknown outcome, so check first
        whether it went through.
        """
        delay = 0.05
        first = not attempted
        while True:
            try:
                if not first:
                    if self.already_applied(ids[-1]):
                        return True
                    if self.check_lost:  # the batch before this one must still be there
                        self.check_not_lost()
                first = False
                self.commit(ids, effects)
                return True
            except (*REDIS_ERRORS, *FAILOVER_ERRORS) as exc:
                log.warning("redis unavailable while committing (%s); retrying in %.2fs", exc, delay)
                if stop.wait(delay):
                    return False
                delay = min(delay * 2, 2.0)

    def _after_outage(self, batch: list[Entry]) -> list[Entry]:
        """The first batch after a Redis error. A consumer that waits for replicas (the gateway's)
        drops what it already handled (a failover can lose its acknowledgement, never the entries it
        read: they were confirmed) and acknowledges it again; one with ``check_lost`` (the matcher on a
        cluster) raises WritesLost when Redis lost its last commit; any other goes on as before."""
        if self.pin is None:
            if self.check_lost:
                self.check_not_lost()
            return batch
        committed = self.committed
        if committed is None:
            return batch
        seen = [entry_id for entry_id, _ in batch if not id_after(entry_id, committed)]
        if seen:
            log.warning("%s: %d entries handled before a failover came again; acknowledged, not resent",
                        self.stream, len(seen))
            self.r.xack(self.stream, self.group, *seen)
        return [(entry_id, msgs) for entry_id, msgs in batch if id_after(entry_id, committed)]

    def _read_failed(self, exc: redis.RedisError, delay: float, stop: threading.Event) -> float:
        """After a failed read: re-read pending entries first, back off on an outage; return the next
        back-off. A lost group (NOGROUP) is created again at once; any other error reply is raised."""
        self._pending_first = True
        if self.pin is not None and isinstance(exc, (redis.ConnectionError, *FAILOVER_ERRORS)):
            self.pin.reset(exc)
        if isinstance(exc, redis.ResponseError) and not isinstance(exc, FAILOVER_ERRORS):
            if "NOGROUP" not in str(exc):
                raise exc
            log.warning("group %s on %s is gone; creating it again", self.group, self.stream)
            return delay
        log.warning("redis unavailable while reading %s (%s); retrying in %.2fs", self.stream, exc, delay)
        stop.wait(delay)
        return min(delay * 2, 2.0)

    def run(self, handle: Handler, stop: threading.Event) -> None:
        """Read, handle, publish and acknowledge until ``stop`` is set."""
        delay = 0.05
        need_group = True  # once at start and after an outage: not a round trip per batch
        while not stop.is_set():
            try:
                if need_group:
                    self.ensure()
                    need_group = False
                batch = self.read()
                delay = 0.05
            except (redis.ResponseError, *REDIS_ERRORS) as exc:
                delay = self._read_failed(exc, delay, stop)
                need_group = True
                self._verify = True
                continue
            if not batch:
                continue
            if self._verify:
                self._verify = False
                batch = self._after_outage(batch)
                if not batch:
                    continue
            effects = handle(batch)
            if not self.commit_retrying([entry_id for entry_id, _ in batch], effects, stop):
                return
            self.consumed += sum(len(msgs) for _, msgs in batch)


class Counted(Protocol):
    """What ``LaneCounters`` sums: a consumer's counts of messages consumed and entries dead-lettered."""

    @property
    def consumed(self) -> int: ...

    @property
    def deadlettered(self) -> int: ...


class LaneCounters:
    """The counts of a consumer made of lanes (one consumer per stream or slot): their sums."""

    lanes: Sequence[Counted]

    @property
    def consumed(self) -> int:
        return sum(lane.consumed for lane in self.lanes)

    @property
    def deadlettered(self) -> int:
        return sum(lane.deadlettered for lane in self.lanes)


StreamRows = list[tuple[bytes, list[tuple[bytes, dict[bytes, bytes]]]]]  # an XREAD reply
CLUSTER_POLL_S = 0.05  # on a cluster, the pause between rounds of XREADs that found nothing


def read_streams(r: redis.Redis | RedisCluster, last_ids: Mapping[str, bytes | str],
                 count: int) -> StreamRows:
    """XREAD (not blocking) of each stream after its last id: [(stream, entries)], streams with none
    left out. One command on one Redis; one per stream on a cluster, which refuses a command naming
    keys of several slots."""
    if isinstance(r, RedisCluster):
        rows: StreamRows = []
        for name, last in last_ids.items():
            got: Any = r.xread({name: last}, count=count)
            rows += got or []
        return rows
    ids: dict[Any, Any] = dict(last_ids)
    everything: Any = r.xread(ids, count=count)
    return everything or []


async def read_streams_async(r: aioredis.Redis | aioredis.RedisCluster, last_ids: Mapping[str, bytes | str],
                             count: int, block_ms: int) -> StreamRows:
    """``read_streams`` for an asyncio client, waiting up to ``block_ms`` for a first entry.

    On one Redis, one blocking XREAD of them all. On a cluster, one XREAD per stream without BLOCK
    (a blocking read per stream would hold the answer until the quietest stream's time-out), then a
    pause of CLUSTER_POLL_S when none had anything.
    """
    if isinstance(r, aioredis.RedisCluster):
        rows: StreamRows = []
        for name, last in last_ids.items():
            got: Any = await r.xread({name: last}, count=count)
            rows += got or []
        if not rows:
            await asyncio.sleep(min(CLUSTER_POLL_S, block_ms / 1000))
        return rows
    ids: dict[Any, Any] = dict(last_ids)
    everything: Any = await r.xread(ids, count=count, block=block_ms)
    return everything or []


def wait_for_redis(r: redis.Redis, timeout_s: float = 10.0) -> None:
    """Block until Redis answers PING (it may still be loading its AOF)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            r.ping()
            return
        except REDIS_ERRORS:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
