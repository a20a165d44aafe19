"""The bus's consumer loop on a lean RESP connection (shared.resp), for consumers of small batches.

``LeanStreamConsumer`` is shared.bus's ``StreamConsumer`` on a lean connection: each batch's
transaction and the next read go out in one write. ``LeanMultiStreamConsumer`` runs it on several
streams at once (a gateway's events from every matcher shard), with one read naming them all: one
Redis only (on a Redis Cluster, shared.bus_cluster runs one per slot).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import redis

from shared import hoptrace, streams
from shared.bus import (
    REDIS_ERRORS,
    Effects,
    Entry,
    Handler,
    LaneCounters,
    StreamConsumer,
    WritesLost,
    id_after,
)
from shared.resp import CommandBuffer, RespConnection, bulk, check, command
from shared.schema import decode_batch, encode_batch

log = logging.getLogger(__name__)

_MULTI = command(b"MULTI")
_EXEC = command(b"EXEC")


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
                    if hoptrace.ON:
                        hoptrace.mark("bus.commit")
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
                if raw and hoptrace.ON:
                    hoptrace.mark("bus.read")
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


class LeanMultiStreamConsumer(LaneCounters):
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

    lanes: list[LeanStreamConsumer]

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
                if done and hoptrace.ON:
                    hoptrace.mark("bus.commit")
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
                reply = check(replies[-1])
                if reply and hoptrace.ON:
                    hoptrace.mark("bus.read")
                batches = self._batches(reply, pending)
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
