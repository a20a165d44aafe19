"""From QuickFIX callbacks to the orders streams: a bounded hand-off and the writer thread.

QuickFIX callbacks must never wait on Redis, so ``fromApp`` only appends to ``CommandQueue``; the
``Writer`` drains whatever has gathered, groups it by matcher shard and publishes one stream entry
per shard per drain, all in one MULTI/EXEC pipeline. When Redis is down the writer keeps the drained
batch and retries with back-off; commands keep gathering in the queue up to its bound, after which
the gateway refuses new orders with a clear Text instead of losing them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable

import redis

from services.gateway.resp import RespConnection
from shared import streams
from shared.config import Instrument
from shared.schema import Command, NewOrder, SessionEnded, encode_wire_batch

log = logging.getLogger(__name__)


# What the engine threads hand over: a received message's text with its receive time (the writer
# translates it), or a command built on the spot (SessionEnded).
Item = tuple[str, int] | Command
Translate = Callable[[str, int], Command | None]


class CommandQueue:
    """A bounded FIFO between the engine threads and the writer; cheap on the put side."""

    def __init__(self, maxlen: int) -> None:
        self.maxlen = maxlen
        self._items: deque[Item] = deque()
        self._wake = threading.Event()
        self._idle = False

    def __len__(self) -> int:
        return len(self._items)

    def put(self, cmd: Item) -> bool:
        """Append ``cmd``; False when the queue is full (the caller refuses the order)."""
        if len(self._items) >= self.maxlen:
            return False
        self._items.append(cmd)
        # Waking a thread costs a lock and a futex: pay it only when the writer sleeps.
        if self._idle:
            self._wake.set()
        return True

    def put_always(self, cmd: Command) -> None:
        """Append a command that must not be refused (SessionEnded), even past the bound."""
        self._items.append(cmd)
        self._wake.set()

    def wake(self) -> None:
        self._wake.set()

    def take(self, max_items: int, timeout_s: float) -> list[Item]:
        """Return up to ``max_items`` commands, waiting up to ``timeout_s`` for the first."""
        items = self._items
        if not items:
            self._idle = True
            # Re-check after raising the flag: a put between the two sees the flag and wakes us.
            if not items:
                self._wake.wait(timeout_s)
            self._idle = False
            self._wake.clear()
        n = min(len(items), max_items)
        popleft = items.popleft
        return [popleft() for _ in range(n)]


class Writer:
    """Publishes queued commands to the orders stream of each command's shard."""

    def __init__(self, conn: RespConnection, queue: CommandQueue, instruments: Iterable[Instrument],
                 maxlen: int, translate: Translate, *, max_batch: int = 5000, linger_above: int = 16,
                 linger_s: float = 0.0005) -> None:
        self.conn = conn
        self.translate = translate
        self.queue = queue
        self.maxlen = maxlen
        self.max_batch = max_batch
        self.linger_above = linger_above
        self.linger_s = linger_s
        self.stream_of = {i.symbol: streams.orders_stream(i.shard) for i in instruments}
        self.all_streams = tuple(sorted(set(self.stream_of.values())))
        self.published = 0
        self.entries = 0
        self.retries = 0
        self._stop = threading.Event()
        self._abandon = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gateway-writer", daemon=True)

    def start(self) -> Writer:
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        """Publish what is queued (while Redis answers, up to ``timeout_s``), then stop."""
        self._stop.set()
        self.queue.wake()
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            self._abandon.set()
            self._thread.join(1.0)

    def group(self, batch: list[Item]) -> tuple[dict[str, list[tuple[object, ...]]], int]:
        """Commands in wire form by orders stream, in arrival order, and how many there are.

        Received messages are translated here (refusals are answered and dropped); SessionEnded
        goes to every shard.
        """
        out: dict[str, list[tuple[object, ...]]] = {}
        stream_of = self.stream_of
        translate = self.translate
        count = 0
        for item in batch:
            if isinstance(item, tuple):
                translated = translate(*item)
                if translated is None:
                    continue
                cmd: Command = translated
            else:
                cmd = item
            count += 1
            wire = to_wire(cmd)
            if isinstance(cmd, SessionEnded):
                for stream in self.all_streams:
                    out.setdefault(stream, []).append(wire)
                continue
            stream = stream_of[cmd.symbol]
            msgs = out.get(stream)
            if msgs is None:
                out[stream] = [wire]
            else:
                msgs.append(wire)
        return out, count

    def flush(self, batch: list[Item]) -> bool:
        """Publish ``batch``, retrying through Redis outages; False when stopped with it unsent."""
        grouped, count = self.group(batch)
        if not grouped:
            return True
        entries = [(stream, encode_wire_batch(msgs)) for stream, msgs in grouped.items()]
        delay = 0.05
        while True:
            try:
                failed = self.conn.xadd_batches(entries, self.maxlen)
                if failed:
                    # Applied entries stay applied (no rollback in Redis): retry only the others.
                    self.entries += len(entries) - len(failed)
                    entries = [entries[i] for i in failed]
                    raise redis.ResponseError(f"XADD refused for {', '.join(e[0] for e in entries)}")
                self.published += count
                self.entries += len(entries)
                return True
            except redis.RedisError as exc:
                # Connection errors and refusals alike (OOM, a stream of the wrong type): keep the
                # batch and retry; losing orders silently would be worse than waiting.
                self.retries += 1
                log.warning("redis unavailable, %d commands wait (%d more queued): %s; retrying in %.2fs",
                            len(batch), len(self.queue), exc, delay)
                if self._abandon.wait(delay):
                    return False
                delay = min(delay * 2, 1.0)

    def _run(self) -> None:
        log.info("writer thread started (tid %d)", threading.get_native_id())
        while True:
            batch = self.queue.take(self.max_batch, 0.2)
            if batch:
                if not self.flush(batch):
                    log.error("stopping with %d commands unpublished (redis unavailable)",
                              len(batch) + len(self.queue))
                    return
                if len(batch) >= self.linger_above and not self._stop.is_set():
                    # Under a flood, let orders gather: fewer, larger entries cost far less per
                    # order. A lone order (the latency case) is never held back.
                    time.sleep(self.linger_s)
            elif self._stop.is_set():
                return


def to_wire(cmd: Command) -> tuple[object, ...]:
    """A command in the schema's wire form (what encode_batch would write), without the generic walk."""
    if type(cmd) is NewOrder:
        return (1, cmd.session, cmd.clordid, cmd.symbol, cmd.side, cmd.price, cmd.qty, cmd.tif,
                cmd.reply_to, cmd.seq, cmd.ts)
    return (cmd.CODE, *(getattr(cmd, name) for name in cmd._FIELDS))
