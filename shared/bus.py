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
Entries that do not decode go to the dead-letter stream with the reason, and are acknowledged.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import redis

from shared import streams
from shared.schema import Message, SchemaError, decode_batch, encode_batch

log = logging.getLogger(__name__)

REDIS_ERRORS = (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError)


def connect(url: str, *, timeout_s: float = 5.0) -> redis.Redis:
    """A synchronous client; bytes in, bytes out."""
    return redis.Redis.from_url(
        url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s, health_check_interval=30
    )


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


class StreamConsumer:
    """One consumer in a group on one stream: pending entries first, then new ones."""

    def __init__(self, r: redis.Redis, stream: str, group: str, name: str, *, count: int = 500,
                 block_ms: int = 500, maxlen: int = 1_000_000, start_id: str = "0") -> None:
        self.r = r
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

    def ensure(self) -> None:
        ensure_group(self.r, self.stream, self.group, self.start_id)

    def read(self) -> list[Entry]:
        """Return the next batch: own pending entries after a (re)start, then new entries."""
        if self._pending_first:
            rows: Any = self.r.xreadgroup(self.group, self.name, {self.stream: "0"}, count=self.count)
            entries = rows[0][1] if rows else []
            if entries:
                return self._decode(entries)
            self._pending_first = False
        rows = self.r.xreadgroup(self.group, self.name, {self.stream: ">"}, count=self.count,
                                 block=self.block_ms)
        return self._decode(rows[0][1]) if rows else []

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
                out.append((entry_id, decode_batch(payload)))
            except SchemaError as exc:
                bad.append((entry_id, str(exc), payload[:4096]))
        if bad:
            self._deadletter(bad)
        return out

    def _deadletter(self, bad: list[tuple[bytes, str, bytes]]) -> None:
        pipe = self.r.pipeline(transaction=True)
        for entry_id, reason, payload in bad:
            log.error("dead-lettering %s %s: %s", self.stream, entry_id.decode(), reason)
            pipe.xadd(streams.DEADLETTER_STREAM,
                      {b"stream": self.stream, b"id": entry_id, b"group": self.group,
                       b"reason": reason, b"payload": payload}, maxlen=10_000, approximate=True)
            pipe.xack(self.stream, self.group, entry_id)
        pipe.execute()
        self.deadlettered += len(bad)

    def already_applied(self, last_id: bytes) -> bool:
        done = self.r.get(self.applied_key)
        return done is not None and not id_after(last_id, done)

    def commit(self, ids: Sequence[bytes], effects: Effects | None) -> None:
        """Publish the effects and acknowledge ``ids`` in one transaction (ids must be in order)."""
        pipe = self.r.pipeline(transaction=True)
        if effects is not None:
            for stream, msgs in effects.out.items():
                if msgs:
                    publish(pipe, stream, msgs, self.maxlen)
            for call in effects.extra:
                call(pipe)
        pipe.xack(self.stream, self.group, *ids)
        pipe.set(self.applied_key, ids[-1])
        pipe.execute()

    def commit_retrying(self, ids: Sequence[bytes], effects: Effects | None,
                        stop: threading.Event) -> bool:
        """Commit, retrying through Redis outages; False only when asked to stop first."""
        delay = 0.05
        first = True
        while True:
            try:
                if not first and self.already_applied(ids[-1]):
                    return True
                first = False
                self.commit(ids, effects)
                return True
            except REDIS_ERRORS as exc:
                log.warning("redis unavailable while committing (%s); retrying in %.2fs", exc, delay)
                if stop.wait(delay):
                    return False
                delay = min(delay * 2, 2.0)

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
            except redis.ResponseError as exc:
                if "NOGROUP" not in str(exc):
                    raise
                log.warning("group %s on %s is gone; creating it again", self.group, self.stream)
                need_group = True
                self._pending_first = True
                continue
            except REDIS_ERRORS as exc:
                log.warning("redis unavailable while reading %s (%s); retrying in %.2fs",
                            self.stream, exc, delay)
                need_group = True
                self._pending_first = True
                stop.wait(delay)
                delay = min(delay * 2, 2.0)
                continue
            if not batch:
                continue
            effects = handle(batch)
            if not self.commit_retrying([entry_id for entry_id, _ in batch], effects, stop):
                return
            self.consumed += sum(len(msgs) for _, msgs in batch)


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
