"""The matcher service: a thin Redis adapter around the engine, one single-threaded process per shard.

Loop (shared.bus.StreamConsumer): read up to ``batch`` entries of the shard's orders stream, apply
every command in them, and publish the events (one entry per destination stream per batch)
together with the acknowledgement in one MULTI/EXEC.

Crash safety. Every so often the same MULTI also stores a snapshot of the whole engine state with
the id of the last entry it covers, and trims the orders stream below that id. Since events and
acknowledgement are one transaction, "acknowledged" means "its events were published". A new
process therefore loads the snapshot, replays silently the entries after it up to the group's last
applied id (their events are already out), and then lets the consumer loop read its pending entries
(read but never acknowledged) before new ones. No event is lost or published twice; a command that
a producer wrote twice is recognised by (session, ClOrdID, MsgSeqNum) and answered once.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any, cast

import redis
from redis.cluster import RedisCluster

from services.matcher.config import MatcherSettings
from services.matcher.engine import BatchResult, Engine, Limits
from services.matcher.lease import Lease
from shared import bus, hoptrace, redis_cluster, resp, streams
from shared.bus import Effects, Entry, StreamConsumer, WritesLost, id_after
from shared.bus_lean import LeanStreamConsumer
from shared.clock import now_ns
from shared.cluster_node import SlotConnection
from shared.health import HealthReporter
from shared.resp import RespConnection
from shared.schema import (
    MatcherSnapshot,
    SchemaError,
    decode,
    decode_wire_batch,
    encode,
    encode_wire_batch,
)

log = logging.getLogger(__name__)

REPLAY_CHUNK = 1000  # entries per XRANGE while replaying


def _exit_now(why: str) -> None:
    # Another process may own the shard now: not one more commit from this one.
    log.critical("lost the shard lease (%s): exiting at once", why)
    os._exit(4)


class RecoveryError(RuntimeError):
    """The state cannot be rebuilt exactly (e.g. the orders stream was trimmed past the snapshot)."""


class MatcherService:
    """One shard's matcher: recover, then consume until ``stop`` is set."""

    def __init__(self, settings: MatcherSettings, r: redis.Redis | None = None) -> None:
        self.settings = settings
        self.shard = settings.shard
        url = settings.common.redis_url
        self.cluster = redis_cluster.is_cluster_url(url) if r is None else isinstance(r, redis.RedisCluster)
        self.r = r if r is not None else self._connect(url)
        self.stream = streams.orders_stream(self.shard)
        self.snapshot_key = streams.snapshot_key(self.shard)
        self.market_stream = streams.shard_market_stream(self.shard)
        self.deadletter_stream = streams.shard_deadletter_stream(self.shard)
        self.maxlen = settings.common.stream_maxlen
        self.limits = Limits(depth_levels=settings.depth_levels, done_orders=settings.done_orders,
                             max_open_per_session=settings.max_open_orders)
        self.consumer = self._consumer(settings)
        self.engine = self._new_engine()
        # Counters (read by the health thread; plain ints and strings, swapped whole).
        self.events = 0
        self.redelivered = 0
        self.malformed = 0
        self.replayed = 0
        self.last_snapshot_id = "0-0"
        self._since_snapshot = 0
        self._snapshot_at = time.monotonic()
        self._last_handled: bytes | None = None
        self._rate_mark = (time.monotonic(), 0)
        self.lease_holder: str | None = None  # default: "host:pid"
        self.lease: Lease | None = None
        self._stream_names: dict[str | None, str] = {}  # destination gateway -> its events stream

    def _connect(self, url: str) -> Any:
        """redis-py's cluster client on a Redis Cluster (every key of a shard is in one slot), else
        the plain client."""
        if self.cluster:
            return redis_cluster.cluster_client(url)
        return bus.connect(url)

    def _consumer(self, settings: MatcherSettings) -> StreamConsumer:
        # Commands go to the engine in wire form (tuples): building a frozen dataclass per command
        # costs about ten times the msgpack decoding and more than a third of the matching itself.
        # The lean RESP consumer sends each batch's commit with the next read: at one order in
        # flight redis-py's per-call cost was most of the matcher's time (see the README).
        args = (self.r, self.stream, streams.MATCHER_GROUP, settings.consumer_name)
        kwargs: dict[str, Any] = {"count": settings.batch, "block_ms": settings.block_ms,
                                  "maxlen": self.maxlen, "decode_payload": decode_wire_batch,
                                  "deadletter": self.deadletter_stream}
        url = settings.common.redis_url
        if resp.supports(url) and not self.cluster:
            return LeanStreamConsumer(args[0], RespConnection(url), *args[1:], **kwargs)
        if resp.supports(url) and self.cluster and settings.common.cluster_lean:
            # Every key of the shard is in one slot: a lean connection to its master, which follows
            # the slot to its new owner after a failover or a resharding (shared.cluster_node).
            conn = SlotConnection(cast(RedisCluster, self.r), self.stream)
            return LeanStreamConsumer(args[0], conn, *args[1:], **kwargs, check_lost=True)
        # rediss:// (TLS stays with redis-py), a cluster with FIXLAB_CLUSTER_LEAN=0: redis-py finds
        # the shard's node.
        return StreamConsumer(*args, **kwargs, check_lost=self.cluster)

    def _new_engine(self) -> Engine:
        return Engine(self.settings.instruments, limits=self.limits, id_prefix=f"{self.shard}-",
                      book_updates=True, market_band_bps=self.settings.market_band_bps)

    # ------------------------------------------------------------------ recovery

    def recover(self) -> None:
        """Rebuild the engine: the latest snapshot, then the acknowledged entries after it."""
        started = time.monotonic()
        bus.wait_for_redis(self.r, timeout_s=30)
        raw: Any = self.r.get(self.snapshot_key)
        covered = "0-0"
        if raw is not None:
            try:
                snap = decode(raw)
                if not isinstance(snap, MatcherSnapshot) or snap.shard != self.shard:
                    raise RecoveryError(f"{self.snapshot_key} does not hold shard {self.shard}'s snapshot")
                self.engine = Engine.restore(snap, self.settings.instruments, limits=self.limits,
                                             id_prefix=f"{self.shard}-", book_updates=True,
                                             market_band_bps=self.settings.market_band_bps)
            except (SchemaError, ValueError, KeyError, TypeError) as exc:
                raise RecoveryError(f"{self.snapshot_key} cannot be restored: {exc}") from None
            covered = snap.last_id
        else:
            self.engine = self._new_engine()
        self.last_snapshot_id = covered
        self._last_handled = None
        applied_raw: Any = self.r.get(self.consumer.applied_key)
        applied = applied_raw.decode() if applied_raw is not None else covered
        # A group created now (first start, or deleted by hand) starts after what was applied.
        bus.ensure_group(self.r, self.stream, streams.MATCHER_GROUP, start_id=applied)
        self._check_not_trimmed(covered, applied)
        replayed = replayed_commands = 0
        start = covered
        while id_after(applied, start):
            rows: Any = self.r.xrange(self.stream, min=f"({start}", max=applied, count=REPLAY_CHUNK)
            if not rows:
                break
            for _, fields_ in rows:
                cmds = self._decode_quietly(fields_)
                if cmds:
                    self.engine.apply_batch(cmds)  # events discarded: they were published
                replayed += 1
                replayed_commands += len(cmds)
            start = rows[-1][0].decode()
        self.replayed = replayed
        self._since_snapshot = replayed_commands  # a clean stop then stores them in a snapshot
        if id_after(applied, "0-0"):
            self._last_handled = applied.encode()
        log.info("recovered shard %s: snapshot at %s, replayed %d entries up to %s, %d resting orders, "
                 "%.2fs", self.shard, covered, replayed, applied, self.engine.resting_orders,
                 time.monotonic() - started)

    def _check_not_trimmed(self, covered: str, applied: str) -> None:
        """Refuse to start when acknowledged entries after the snapshot are gone from the stream.

        The matcher itself only trims below its snapshot's entry, so that entry is still there; if
        the stream now starts after it, someone else trimmed past it. Without a snapshot nothing
        may have been removed at all.
        """
        if not id_after(applied, covered):
            return
        info: Any = self.r.xinfo_stream(self.stream)
        first = info.get("first-entry")
        first_id = first[0].decode() if first else None
        if covered == "0-0":
            lost = int(info.get("entries-added", 0)) > int(info.get("length", 0))
        else:
            lost = first_id is None or id_after(first_id, covered)
        if lost:
            raise RecoveryError(
                f"{self.stream} was trimmed past the snapshot at {covered} (it now starts at {first_id}): "
                f"acknowledged commands are gone and the books cannot be rebuilt exactly (raise "
                f"FIXLAB_STREAM_MAXLEN or snapshot more often with FIXLAB_MATCHER_SNAPSHOT_EVERY)")

    @staticmethod
    def _decode_quietly(fields_: dict[bytes, bytes] | None) -> list[tuple[Any, ...]]:
        # The consumer loop dead-lettered what does not decode; replay skips it the same way.
        payload = fields_.get(streams.BATCH_FIELD) if fields_ else None
        if payload is None:
            return []
        try:
            return decode_wire_batch(payload)
        except SchemaError:
            return []

    # ------------------------------------------------------------------ the batch handler

    def handle(self, batch: list[Entry]) -> Effects:
        """Apply a batch of entries; return its events (and maybe a snapshot) as effects."""
        if self._last_handled is not None and not id_after(batch[0][0], self._last_handled):
            # Entries come in id order, each once: an old one again means Redis lost acknowledged
            # writes (a crash without fsync). Our state is ahead of the bus: rebuild from it.
            raise RecoveryError(f"{self.stream} handed out {batch[0][0].decode()} again, after "
                                f"{self._last_handled.decode()} was applied: restart to rebuild")
        cmds: list[Any] = []
        for _, msgs in batch:
            cmds.extend(msgs)
        result = self.engine.apply_batch(cmds)
        last_id = batch[-1][0]
        self._last_handled = last_id
        effects = Effects()
        effects.extra.append(self._publisher(result))
        if result.malformed:
            effects.extra.append(self._dead_letters(batch, result))
        self.events += len(result.events)
        self.redelivered += result.redelivered
        self.malformed += len(result.malformed)
        self._since_snapshot += len(cmds)
        if self._snapshot_due():
            effects.extra.append(self._snapshot_writer(last_id.decode()))
        if hoptrace.ON:
            hoptrace.mark("matcher.handled")
        return effects

    def _publisher(self, result: BatchResult) -> Callable[[Any], None]:
        grouped: dict[str | None, list[tuple[Any, ...]]] = {}
        for dest, wire in result.events:
            lst = grouped.get(dest)
            if lst is None:
                grouped[dest] = [wire]
            else:
                lst.append(wire)
        names = self._stream_names
        payloads = []
        for dest, wires in grouped.items():
            name = names.get(dest)
            if name is None:
                name = names[dest] = self._destination(dest)
            payloads.append((name, encode_wire_batch(wires)))
        maxlen = self.maxlen

        def publish(pipe: Any) -> None:
            for stream, payload in payloads:
                pipe.xadd(stream, {streams.BATCH_FIELD: payload}, maxlen=maxlen, approximate=True)

        return publish

    def _destination(self, gateway_id: str | None) -> str:
        """The stream of the shard's slot for a gateway's events, or for market data (None)."""
        if gateway_id is None:
            return self.market_stream
        return streams.shard_events_stream(self.shard, gateway_id)

    def _dead_letters(self, batch: list[Entry], result: BatchResult) -> Callable[[Any], None]:
        where = {id(m): entry_id for entry_id, msgs in batch for m in msgs}
        rows = []
        for cmd, reason in result.malformed:
            log.error("dead-lettering a command of %s %s: %s", self.stream, where[id(cmd)].decode(), reason)
            payload = encode_wire_batch([cmd]) if isinstance(cmd, tuple) else encode(cmd)
            rows.append({b"stream": self.stream, b"id": where[id(cmd)], b"group": streams.MATCHER_GROUP,
                         b"reason": reason, b"payload": payload})

        deadletter = self.deadletter_stream

        def write(pipe: Any) -> None:
            for row in rows:
                pipe.xadd(deadletter, row, maxlen=10_000, approximate=True)

        return write

    def _snapshot_due(self) -> bool:
        if self._since_snapshot >= self.settings.snapshot_every:
            return True
        return (self._since_snapshot > 0
                and time.monotonic() - self._snapshot_at >= self.settings.snapshot_seconds)

    def _snapshot_writer(self, last_id: str) -> Callable[[Any], None]:
        blob = encode(self.engine.snapshot(self.shard, last_id, now_ns()))
        self._since_snapshot = 0
        self._snapshot_at = time.monotonic()
        self.last_snapshot_id = last_id
        key, stream = self.snapshot_key, self.stream

        def write(pipe: Any) -> None:
            pipe.set(key, blob)
            # Everything below last_id is acknowledged (one consumer, in order) and in the snapshot.
            pipe.xtrim(stream, minid=last_id, approximate=True)

        return write

    # ------------------------------------------------------------------ lifecycle

    def counters(self) -> dict[str, int | float | str]:
        now = time.monotonic()
        commands = self.engine.commands
        mark_t, mark_n = self._rate_mark
        rate = (commands - mark_n) / (now - mark_t) if now > mark_t else 0.0
        self._rate_mark = (now, commands)
        out: dict[str, int | float | str] = {
            "shard": self.shard, "commands": commands, "events": self.events,
            "orders_per_s": round(rate, 1), "resting_orders": self.engine.resting_orders,
            "redelivered": self.redelivered, "malformed": self.malformed, "replayed": self.replayed,
            "last_snapshot_id": self.last_snapshot_id, "deadlettered": self.consumer.deadlettered,
        }
        with contextlib.suppress(*bus.REDIS_ERRORS, redis.ResponseError):
            pending: Any = self.r.xpending(self.stream, streams.MATCHER_GROUP)
            out["pending"] = int(pending["pending"])
        return out

    def run(self, stop: threading.Event, on_lease_lost: Callable[[str], None] | None = None) -> None:
        """Take the shard's lease, recover, then consume until ``stop`` is set.

        On a clean stop the last state is stored as a snapshot, so the next start replays nothing.
        """
        self.lease = lease = Lease(self.r, streams.matcher_lease_key(self.shard),
                                   ttl_s=self.settings.lease_seconds, holder=self.lease_holder)
        if not lease.acquire(stop):
            return
        lease.keep(on_lease_lost or _exit_now)
        try:
            self.recover()
            health = HealthReporter(self.r, "matcher", self.shard, self.counters,
                                    interval_s=self.settings.health_interval_s).start()
            try:
                try:
                    self.consumer.run(self.handle, stop)
                except WritesLost as exc:  # a failover's promoted replica lacks our last commit
                    raise RecoveryError(f"{exc}: restart to rebuild from what Redis kept") from None
                self._final_snapshot()
            finally:
                health.stop()
        finally:
            lease.release()
        log.info("matcher shard %s stopped after %d commands", self.shard, self.engine.commands)

    def _final_snapshot(self) -> None:
        last = self._last_handled
        if last is None or self._since_snapshot == 0:
            return
        try:
            # Only when the last batch's events went out: otherwise the state is ahead of the bus.
            if not self.consumer.already_applied(last):
                return
            pipe = self.r.pipeline(transaction=True)
            self._snapshot_writer(last.decode())(pipe)
            pipe.execute()
            log.info("final snapshot at %s", last.decode())
        except bus.REDIS_ERRORS as exc:
            log.warning("no final snapshot (redis unavailable: %s)", exc)

