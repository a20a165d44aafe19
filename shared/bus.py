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

``LeanStreamConsumer`` is the same loop on a lean RESP connection (shared.resp) for a consumer
whose batches are small: each batch's transaction and the next read go out in one write.
``LeanMultiStreamConsumer`` runs it on several streams at once (a gateway's events from every
matcher shard); on a Redis Cluster, where one command names one slot, ``ClusterMultiStreamConsumer``
does it with one consumer (and thread) per slot, lean ones on a connection to the slot's master
(shared.cluster_node) or redis-py's cluster client. ``read_streams``
(and ``read_streams_async``) follow several streams without a group: one XREAD on one Redis, one
per stream on a Redis Cluster.

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
from typing import Any, cast

import redis
import redis.asyncio as aioredis
from redis.cluster import RedisCluster
from redis.crc import key_slot

from shared import redis_cluster, streams
from shared.cluster_node import SlotConnection
from shared.replication import FAILOVER_ERRORS, NodePin, pin_for
from shared.resp import CommandBuffer, RespConnection, bulk, check, command
from shared.schema import Message, SchemaError, decode_batch, encode_batch

log = logging.getLogger(__name__)

REDIS_ERRORS = (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError)
_MULTI = command(b"MULTI")
_EXEC = command(b"EXEC")


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


class LeanStreamConsumer(StreamConsumer):
    """The same consumer on a lean RESP connection, for small batches at a high rate.

    Reads and commits go over ``conn`` (shared.resp): replies are parsed by hiredis and decoded
    here, with none of redis-py's per-call cost. In ``run`` each batch's MULTI/EXEC (effects, XACK,
    applied id) is sent in the same write as the next XREADGROUP, and the replies are read in
    order: one round trip and one wake-up per batch. The guarantees are the base class's:
    - the read runs after EXEC on the same connection, so it never hands out what was just
      acknowledged; if the commit's outcome is unknown (the connection failed), it is retried on
      its own with the applied-id check, and pending entries are read again first (the read that
      went out with it may have claimed entries);
    - an error reply inside the transaction stops the loop, as redis-py's pipeline would.
    The redis-py client ``r`` serves the rare calls (group creation, dead letters, applied-id
    checks); the lean connection needs a redis:// or unix:// URL (see shared.resp.supports).
    """

    def __init__(self, r: redis.Redis, conn: RespConnection, stream: str, group: str, name: str, *,
                 count: int = 500, block_ms: int = 500, maxlen: int = 1_000_000, start_id: str = "0",
                 decode_payload: Callable[[bytes], list[Any]] = decode_batch,
                 deadletter: str = streams.DEADLETTER_STREAM, check_lost: bool = False) -> None:
        """``check_lost`` (a cluster only): each read of new entries carries a GET of the applied id
        in the same write, and the first batch after a Redis error is checked too (WritesLost)."""
        super().__init__(r, stream, group, name, count=count, block_ms=block_ms, maxlen=maxlen,
                         start_id=start_id, decode_payload=decode_payload, deadletter=deadletter,
                         check_lost=check_lost)
        self.conn = conn
        self._get_applied = command(b"GET", self.applied_key)
        head = (b"XREADGROUP", b"GROUP", group, name, b"COUNT", count)
        self._read_pending = command(*head, b"STREAMS", stream, b"0")
        self._read_new = command(*head, b"BLOCK", block_ms, b"STREAMS", stream, b">")
        self._block_timeout_s = conn.timeout_s + block_ms / 1000
        self._xack_head = bulk(b"XACK") + bulk(stream) + bulk(group)
        self._set_head = b"*3\r\n" + bulk(b"SET") + bulk(self.applied_key)

    # --------------------------------------------------------------- the base class's API

    def read(self) -> list[Entry]:
        """Return the next batch: own pending entries after a (re)start, then new entries."""
        while True:
            pending = self._pending_first
            cmd, timeout = self._read_command()
            raw = self._rows(check(self.conn.roundtrip(cmd, 1, timeout_s=timeout)[0]))
            if raw or not pending:
                return self._decode(raw)
            self._pending_first = False

    def commit(self, ids: Sequence[bytes], effects: Effects | None) -> None:
        """Publish the effects and acknowledge ``ids`` in one transaction (ids must be in order)."""
        payload, n = self._transaction(ids, effects)
        self._check_transaction(self.conn.roundtrip(payload, n))
        self.committed = ids[-1]

    # --------------------------------------------------------------- the loop

    def run(self, handle: Handler, stop: threading.Event) -> None:
        """Read, handle, publish and acknowledge until ``stop`` is set; then close the connection."""
        try:
            self._run(handle, stop)
        finally:
            self.conn.close()

    def _run(self, handle: Handler, stop: threading.Event) -> None:
        delay = 0.05
        need_group = True
        owed: _Owed | None = None  # a handled batch whose commit goes out with the next read
        verify = False  # check_lost: after a Redis error, is our last commit still there?
        while True:
            if stop.is_set():
                if owed is not None and self.commit_retrying(owed.ids, owed.effects, stop):
                    self.consumed += owed.messages
                return
            read_pending = self._pending_first
            try:
                if need_group:
                    self.ensure()
                    need_group = False
                cmd, timeout = self._read_command()
                checked = self.check_lost and not read_pending  # GET applied id, then the read
                if checked:
                    cmd = self._get_applied + cmd
                n_read = 2 if checked else 1
                if owed is None:
                    replies = self.conn.roundtrip(cmd, n_read, timeout_s=timeout)
                else:
                    done, owed = owed, None
                    try:
                        replies = self.conn.roundtrip(done.payload + cmd, done.replies + n_read,
                                                      timeout_s=timeout)
                        self._check_transaction(replies[:done.replies])
                    except REDIS_ERRORS as exc:
                        log.warning("redis failed while committing (%s); retrying the commit alone", exc)
                        self._pending_first = True  # the read that went with it may have claimed entries
                        verify = self.check_lost
                        if not self.commit_retrying(done.ids, done.effects, stop, attempted=True):
                            return
                        self.consumed += done.messages
                        continue
                    self.consumed += done.messages
                    self.committed = done.ids[-1]
                if checked:
                    self._check_applied(replies[-2])
                raw = self._rows(check(replies[-1]))
                if not raw and read_pending:
                    self._pending_first = False
                batch = self._decode(raw) if raw else []  # may dead-letter (through ``r``)
                delay = 0.05
            except (redis.ResponseError, *REDIS_ERRORS) as exc:
                delay = self._read_failed(exc, delay, stop)
                need_group = True
                verify = self.check_lost
                continue
            if not batch:  # nothing new, or every entry was dead-lettered (and acknowledged)
                continue
            if verify:  # the first batch after an outage: the commit before it must still be there
                verify = False
                self.check_not_lost()
            effects = handle(batch)
            ids = [entry_id for entry_id, _ in batch]
            payload, n = self._transaction(ids, effects)
            owed = _Owed(ids, effects, payload, n, sum(len(msgs) for _, msgs in batch))

    # --------------------------------------------------------------- RESP

    def _read_command(self) -> tuple[bytes, float]:
        if self._pending_first:
            return self._read_pending, self.conn.timeout_s
        return self._read_new, self._block_timeout_s

    @staticmethod
    def _rows(reply: Any) -> list[tuple[bytes, dict[bytes, bytes] | None]]:
        """An XREADGROUP reply's entries as (id, fields) pairs (fields None: trimmed while pending)."""
        if not reply:
            return []
        out: list[tuple[bytes, dict[bytes, bytes] | None]] = []
        for entry_id, flat in reply[0][1]:
            if flat is None:
                out.append((entry_id, None))
            elif len(flat) == 2:
                out.append((entry_id, {flat[0]: flat[1]}))
            else:
                out.append((entry_id, dict(zip(flat[0::2], flat[1::2], strict=True))))
        return out

    def _transaction(self, ids: Sequence[bytes], effects: Effects | None) -> tuple[bytes, int]:
        """MULTI, the effects, XACK, SET applied id, EXEC: (the bytes, the number of replies)."""
        buf = CommandBuffer()
        buf.commands.append(_MULTI)
        if self.cluster and effects is not None:  # another slot's calls: sent now, at least once
            effects = self._publish_elsewhere(effects)
        if effects is not None:
            for stream, msgs in effects.out.items():
                if msgs:
                    buf.xadd(stream, {streams.BATCH_FIELD: encode_batch(msgs)}, maxlen=self.maxlen,
                             approximate=True)
            for call in effects.extra:
                call(buf)
            for call in effects.elsewhere:
                call(buf)
        acked = b"".join([bulk(i) for i in ids])
        buf.commands.append(b"*%d\r\n%s%s" % (len(ids) + 3, self._xack_head, acked))
        buf.commands.append(self._set_head + bulk(ids[-1]))
        buf.commands.append(_EXEC)
        return b"".join(buf.commands), len(buf)

    def _check_applied(self, reply: Any) -> None:
        """Raise WritesLost when the applied id Redis holds is before the last one committed here."""
        done = check(reply)
        if self.committed is not None and (done is None or id_after(self.committed, done)):
            raise WritesLost(f"{self.applied_key} is {done!r} after {self.committed.decode()} was "
                             f"committed: Redis lost acknowledged writes")

    def _check_transaction(self, replies: list[Any]) -> None:
        """Raise the first error of a MULTI ... EXEC, as redis-py's pipeline does."""
        try:
            for reply in replies[:-1]:  # +OK, then +QUEUED or a refusal
                check(reply)
            result = check(replies[-1])
            if not isinstance(result, list):
                raise redis.ResponseError(f"EXEC did not run: {result!r}")
            for item in result:
                check(item)
        except redis.RedisError:
            self.conn.close()  # the read sent after EXEC still owes a reply
            raise


@dataclass(slots=True, frozen=True)
class _Owed:
    ids: list[bytes]
    effects: Effects | None
    payload: bytes
    replies: int
    messages: int


class LeanMultiStreamConsumer:
    """One consumer of one group on several streams over one lean connection (shared.resp).

    Each stream is a lane (a ``LeanStreamConsumer`` on the shared connection) with its own pending
    entries, applied id and dead letters; the handler gets each stream's entries in order, one
    stream's batch at a time. One XREADGROUP names every stream (``>`` for each, or ``0`` for a lane
    still reading its pending entries after a (re)start), so a quiet gateway blocks in one command
    for all its shards. Each lane's batch is acknowledged in its own MULTI/EXEC, which names that
    stream's slot only; the transactions go out in the same write as the next read, as in
    ``LeanStreamConsumer``, with the same guarantees. The read naming several slots needs one Redis
    (the lean connection speaks to one node).
    """

    def __init__(self, r: redis.Redis, conn: RespConnection, names: Sequence[str], group: str, name: str,
                 *, count: int = 500, block_ms: int = 500, maxlen: int = 1_000_000) -> None:
        if not names:
            raise ValueError("no stream to consume")
        self.conn = conn
        self.lanes = [LeanStreamConsumer(r, conn, stream, group, name, count=count, block_ms=block_ms,
                                         maxlen=maxlen) for stream in names]
        self._head = (b"XREADGROUP", b"GROUP", group, name, b"COUNT", count)
        self._names = [lane.stream.encode() for lane in self.lanes]
        self._read_new = command(*self._head, b"BLOCK", block_ms, b"STREAMS", *self._names,
                                 *([b">"] * len(self._names)))
        self._block_timeout_s = conn.timeout_s + block_ms / 1000

    @property
    def consumed(self) -> int:
        return sum(lane.consumed for lane in self.lanes)

    @property
    def deadlettered(self) -> int:
        return sum(lane.deadlettered for lane in self.lanes)

    def run(self, handle: Handler, stop: threading.Event) -> None:
        """Read, handle and acknowledge until ``stop`` is set; then close the connection."""
        try:
            self._run(handle, stop)
        finally:
            self.conn.close()

    def _run(self, handle: Handler, stop: threading.Event) -> None:
        delay = 0.05
        need_group = True
        owed: list[tuple[LeanStreamConsumer, _Owed]] = []  # commits that go out with the next read
        while True:
            if stop.is_set():
                self._settle(owed, stop, attempted=False)
                return
            try:
                if need_group:
                    for lane in self.lanes:
                        lane.ensure()
                    need_group = False
                pending = [lane._pending_first for lane in self.lanes]
                cmd, timeout = self._read_command(pending)
                done, owed = owed, []
                try:
                    replies = self.conn.roundtrip(b"".join(o.payload for _, o in done) + cmd,
                                                  sum(o.replies for _, o in done) + 1, timeout_s=timeout)
                    self._check_transactions(done, replies)
                except REDIS_ERRORS as exc:
                    if not done:
                        raise
                    log.warning("redis failed while committing (%s); retrying the commits alone", exc)
                    self._all_pending()  # the read that went with them may have claimed entries
                    if not self._settle(done, stop, attempted=True):
                        return
                    continue
                batches = self._batches(check(replies[-1]), pending)
                delay = 0.05
            except (redis.ResponseError, *REDIS_ERRORS) as exc:
                delay = self._read_failed(exc, delay, stop)
                need_group = True
                continue
            for lane, batch in batches:
                effects = handle(batch)
                ids = [entry_id for entry_id, _ in batch]
                payload, n = lane._transaction(ids, effects)
                owed.append((lane, _Owed(ids, effects, payload, n, sum(len(msgs) for _, msgs in batch))))

    def _read_command(self, pending: list[bool]) -> tuple[bytes, float]:
        if not any(pending):
            return self._read_new, self._block_timeout_s
        ids = [b"0" if p else b">" for p in pending]  # pending entries come back at once: no BLOCK
        return command(*self._head, b"STREAMS", *self._names, *ids), self.conn.timeout_s

    @staticmethod
    def _check_transactions(done: list[tuple[LeanStreamConsumer, _Owed]], replies: list[Any]) -> None:
        """Raise the first error of the lanes' transactions; else count their messages consumed."""
        at = 0
        for lane, o in done:
            lane._check_transaction(replies[at:at + o.replies])
            at += o.replies
        for lane, o in done:
            lane.consumed += o.messages

    def _batches(self, reply: Any, pending: list[bool]) -> list[tuple[LeanStreamConsumer, list[Entry]]]:
        """Each lane's decoded entries in the reply (dead letters written and acknowledged)."""
        by_name = {name: entries for name, entries in reply or ()}
        out = []
        for lane, name, was_pending in zip(self.lanes, self._names, pending, strict=True):
            raw = lane._rows([(name, by_name[name])]) if by_name.get(name) else []
            if not raw:
                if was_pending:
                    lane._pending_first = False
                continue
            batch = lane._decode(raw)
            if batch:
                out.append((lane, batch))
        return out

    def _settle(self, owed: list[tuple[LeanStreamConsumer, _Owed]], stop: threading.Event, *,
                attempted: bool) -> bool:
        """Commit each owed batch on its own (``attempted``: sent once, outcome unknown); False on stop."""
        for lane, o in owed:
            if not lane.commit_retrying(o.ids, o.effects, stop, attempted=attempted):
                return False
            lane.consumed += o.messages
        return True

    def _all_pending(self) -> None:
        for lane in self.lanes:
            lane._pending_first = True

    def _read_failed(self, exc: redis.RedisError, delay: float, stop: threading.Event) -> float:
        self._all_pending()
        return self.lanes[0]._read_failed(exc, delay, stop)


class ClusterMultiStreamConsumer:
    """``LeanMultiStreamConsumer``'s job on a Redis Cluster: one consumer of one group on each stream.

    A cluster refuses a read naming streams of several slots, so each stream gets its own
    ``StreamConsumer`` on redis-py's cluster client (which follows the stream's slot to its node, and
    to a new one after a failover), in a thread of its own, blocking on its stream alone. Each keeps
    the loop's guarantees for its stream: pending entries first, the batch acknowledged with its
    applied id in one transaction in the stream's slot. The handler is called by one thread at a
    time, each stream's batches in order (streams interleave as they arrive).

    ``lean``: each slot's streams get a ``LeanMultiStreamConsumer`` instead, on a lean connection to
    the slot's master (shared.cluster_node.SlotConnection, which follows the slot when it moves): the
    same guarantees, without redis-py's cost per call.
    """

    def __init__(self, r: RedisCluster | redis.Redis, names: Sequence[str], group: str, name: str, *,
                 count: int = 500, block_ms: int = 500, maxlen: int = 1_000_000,
                 wait_replicas: int = 0, lean: bool = False) -> None:
        if not names:
            raise ValueError("no stream to consume")
        self.lanes: list[StreamConsumer | LeanMultiStreamConsumer]
        if lean and wait_replicas <= 0 and isinstance(r, RedisCluster):
            self.lanes = [LeanMultiStreamConsumer(cast(redis.Redis, r), SlotConnection(r, in_slot[0]),
                                                  in_slot, group, name, count=count, block_ms=block_ms,
                                                  maxlen=maxlen)
                          for in_slot in by_slot(names)]
        else:
            self.lanes = [StreamConsumer(cast(redis.Redis, r), stream, group, name, count=count,
                                         block_ms=block_ms, maxlen=maxlen, wait_replicas=wait_replicas)
                          for stream in names]
        self._lock = threading.Lock()

    @property
    def consumed(self) -> int:
        return sum(lane.consumed for lane in self.lanes)

    @property
    def deadlettered(self) -> int:
        return sum(lane.deadlettered for lane in self.lanes)

    def run(self, handle: Handler, stop: threading.Event) -> None:
        """Read, handle and acknowledge every stream until ``stop`` is set."""
        def one_at_a_time(batch: list[Entry]) -> Effects | None:
            with self._lock:
                return handle(batch)

        threads = [threading.Thread(target=self._lane, args=(lane, one_at_a_time, stop),
                                    name=f"{threading.current_thread().name}-{i}", daemon=True)
                   for i, lane in enumerate(self.lanes)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    @staticmethod
    def _lane(lane: StreamConsumer | LeanMultiStreamConsumer, handle: Handler, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                lane.run(handle, stop)
            except Exception:  # an error reply the loop does not retry: this stream only, again soon
                what = lane.stream if isinstance(lane, StreamConsumer) else ", ".join(
                    x.stream for x in lane.lanes)
                log.exception("consumer of %s: unexpected error; reading again in 1 s", what)
                stop.wait(1.0)


def by_slot(names: Sequence[str]) -> list[list[str]]:
    """``names`` grouped by cluster slot, in order of first appearance (one read may name one slot)."""
    groups: dict[int, list[str]] = {}
    for stream in names:
        groups.setdefault(key_slot(stream.encode()), []).append(stream)
    return list(groups.values())


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
