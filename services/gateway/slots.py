"""The intake's writes on a Redis Cluster: one transaction per slot, a done count in each.

On one Redis the intake publisher writes a batch in one MULTI/EXEC (services.gateway.resp): every
shard's orders, the refusals on the gateway's events stream and the count of records done. A cluster
refuses a transaction over several slots, so here each destination stream gets its own atomic write
with its own done count in its slot (``shard_intake_done_key`` beside a shard's orders stream, the
gateway's ``intake_done_key`` beside its events stream), as deploy/SCALING.md section 2 says. The
write is a script (XADD, then SET of the count): unlike a MULTI, whose SET would still run when its
XADD is refused at EXEC (a key of the wrong type), it sets no count for an entry it did not add.

What the counts are for: a publisher started again after a crash skips, destination by destination,
the records its predecessor already put there (``Publisher.skip``), so a batch half published
(one shard's transaction ran, another's did not) is completed, not doubled. A transaction whose
outcome is unknown (the connection failed after sending it) is checked against its count before
it is sent again.

With replicas asked for (FIXLAB_REDIS_WAIT_REPLICAS, shared.replication), a write counts only once
WAIT on its node's connection says a replica holds it: until then its outcome is unknown, as after a
lost connection, so a master that dies before its replica has the write loses nothing the acceptor
forgot: the count is checked on the promoted replica and the write sent again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import hiredis
import redis
from redis.cluster import RedisCluster

from shared import streams
from shared.cluster_node import SlotConnection
from shared.config import Instrument
from shared.replication import FAILOVER_ERRORS, WAIT_TIMEOUT_MS, NodePin, pin_for
from shared.resp import check, command

DAY_MS = 86_400_000  # as on one Redis: a run's done counts are kept a day

# KEYS: stream, done count. ARGV: maxlen, batch field, payload, done, ttl in ms.
_XADD_DONE = """
redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[1], '*', ARGV[2], ARGV[3])
redis.call('SET', KEYS[2], ARGV[4], 'PX', ARGV[5])
"""


def done_keys(instruments: Iterable[Instrument], gateway_id: str, run: str) -> dict[str, str]:
    """Each stream the intake writes (every shard's orders, the gateway's events) -> its done count."""
    keys = {streams.orders_stream(i.shard): streams.shard_intake_done_key(i.shard, gateway_id, run)
            for i in instruments}
    keys[streams.events_stream(gateway_id)] = streams.intake_done_key(gateway_id, run)
    return keys


class ClusterIntake:
    """``RespConnection.xadd_batches`` for a cluster: one atomic write per destination stream.

    ``lean``: each destination's write goes over a lean connection to its slot's master
    (shared.cluster_node.SlotConnection: EVALSHA, hiredis replies, the slot followed when it moves)
    instead of redis-py's cluster client; the done-count checks stay on ``r`` (they are rare). With
    ``wait_replicas`` the writes go over the pinned node clients (shared.replication) instead.
    """

    def __init__(self, r: RedisCluster, keys: Mapping[str, str], *, wait_replicas: int = 0,
                 wait_ms: int = WAIT_TIMEOUT_MS, lean: bool = False, timeout_s: float = 5.0) -> None:
        self.r = r
        self.keys = keys  # destination stream -> its done count (same slot)
        self._unsure: set[str] = set()  # streams whose last write may or may not have run (or be kept)
        self._xadd_done = r.register_script(_XADD_DONE)
        self.wait_replicas = wait_replicas
        self.wait_ms = wait_ms
        self._pins: dict[str, NodePin | None] = {}  # destination stream -> its node's connection
        self.lean = lean and wait_replicas <= 0
        self.timeout_s = timeout_s
        self._conns: dict[str, SlotConnection] = {}  # destination stream -> its master (lean)

    def _pin(self, stream: str) -> NodePin | None:
        if stream not in self._pins:
            self._pins[stream] = pin_for(self.r, stream, self.wait_replicas)
        return self._pins[stream]

    def xadd_batches(self, entries: Sequence[tuple[str, bytes]], maxlen: int,
                     done: tuple[str, int] | None = None) -> list[int]:
        """Append each (stream, encoded batch), each atomically with its stream's done count
        (``done``'s number; its key is the one-Redis count, unused here); return the indexes that
        failed. Raise when every one failed (nothing of the batch was applied)."""
        failed: list[int] = []
        error: redis.RedisError | None = None
        for i, (stream, payload) in enumerate(entries):
            key = None if done is None else self.keys[stream]
            pin = self._pin(stream)
            client: Any = self.r if pin is None else pin.client
            try:
                if key is not None and stream in self._unsure and self._already(key, done, pin):
                    self._confirm(stream, pin)
                    self._unsure.discard(stream)
                    continue
                if self.lean:
                    self._write_lean(stream, payload, maxlen, key, done)
                elif key is not None and done is not None:
                    self._xadd_done(keys=[stream, key],
                                    args=[maxlen, streams.BATCH_FIELD, payload, done[1], DAY_MS],
                                    client=None if pin is None else client())
                else:
                    (self.r if pin is None else client()).xadd(stream, {streams.BATCH_FIELD: payload},
                                                               maxlen=maxlen, approximate=True)
                self._unsure.add(stream)
                self._confirm(stream, pin)
                self._unsure.discard(stream)
            except (redis.ConnectionError, redis.TimeoutError, *FAILOVER_ERRORS) as exc:
                self._unsure.add(stream)
                if pin is not None and not isinstance(exc, redis.TimeoutError):
                    pin.reset(exc)
                failed.append(i)
                error = exc
            except redis.RedisError as exc:
                failed.append(i)
                error = exc
        if error is not None and len(failed) == len(entries):
            raise error
        return failed

    def _write_lean(self, stream: str, payload: bytes, maxlen: int, key: str | None,
                    done: tuple[str, int] | None) -> None:
        """The same write as redis-py's, over the lean connection to ``stream``'s master."""
        conn = self._conns.get(stream)
        if conn is None:
            conn = self._conns[stream] = SlotConnection(self.r, stream, timeout_s=self.timeout_s)
        if key is None or done is None:
            check(conn.roundtrip(command(b"XADD", stream, b"MAXLEN", b"~", maxlen, b"*",
                                         streams.BATCH_FIELD, payload), 1)[0])
            return
        args = (2, stream, key, maxlen, streams.BATCH_FIELD, payload, done[1], DAY_MS)
        reply = conn.roundtrip(command(b"EVALSHA", self._xadd_done.sha, *args), 1)[0]
        if isinstance(reply, hiredis.ReplyError) and str(reply).startswith("NOSCRIPT"):
            reply = conn.roundtrip(command(b"EVAL", _XADD_DONE, *args), 1)[0]  # and cached there
        check(reply)

    def close(self) -> None:
        for conn in self._conns.values():
            conn.close()

    def _confirm(self, stream: str, pin: NodePin | None) -> None:
        """Raise TimeoutError unless the replicas asked for hold what ``pin``'s connection wrote."""
        if pin is not None and not pin.confirmed(self.wait_ms):
            raise redis.TimeoutError(f"no replica of {pin.address} confirmed {stream} yet")

    def _already(self, key: str, done: tuple[str, int] | None, pin: NodePin | None) -> bool:
        raw: Any = (self.r if pin is None else pin.client()).get(key)
        return done is not None and raw is not None and int(raw) >= done[1]

    def done_counts(self) -> dict[str, int]:
        """What the run's publishers put on each destination so far (0 where nothing)."""
        out = {}
        for stream, key in self.keys.items():
            raw: Any = self.r.get(key)
            out[stream] = int(raw) if raw else 0
        return out
