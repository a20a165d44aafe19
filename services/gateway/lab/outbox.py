"""The lab streams' one writer: messages for every lab session, in the order they were put.

QuickFIX callbacks and the tap's loop must never wait on Redis, so they put into a bounded queue
and this thread writes batches (one pipeline per batch, one stream entry per lab per batch), bounds
each lab stream (approximate MAXLEN) and sets its expiry. Through a Redis outage it keeps the batch
and retries, so order is kept; when the queue is full a message is counted as dropped, never blocks.
"""

from __future__ import annotations

import logging
import queue
import threading
from dataclasses import dataclass

import redis

from shared import streams
from shared.bus import REDIS_ERRORS, publish
from shared.schema import Message

log = logging.getLogger(__name__)

QUEUE_SIZE = 100_000
BATCH = 1000


@dataclass(frozen=True, slots=True)
class _Item:
    lab_id: str
    msg: Message
    ttl_ms: int  # the lab stream's expiry from this write on


class Outbox:
    """The one ordered writer of every lab stream (see the module docstring)."""

    def __init__(self, r: redis.Redis, maxlen: int) -> None:
        self.r = r
        self.maxlen = maxlen
        self._queue: queue.Queue[_Item | None] = queue.Queue(QUEUE_SIZE)
        self._thread = threading.Thread(target=self._run, name="lab-outbox", daemon=True)
        self._stopping = threading.Event()
        self.written = 0
        self.dropped = 0

    def start(self) -> Outbox:
        self._thread.start()
        return self

    @property
    def pending(self) -> int:
        """Messages queued and not yet written."""
        return self._queue.qsize()

    def put(self, lab_id: str, msg: Message, ttl_s: float) -> None:
        """Queue ``msg`` for ``lab_stream(lab_id)``; the stream expires ``ttl_s`` after this write."""
        try:
            self._queue.put_nowait(_Item(lab_id, msg, max(1000, int(ttl_s * 1000))))
        except queue.Full:
            self.dropped += 1
            log.error("lab outbox full: dropped a %s for lab %s", type(msg).__name__, lab_id)

    def stop(self, timeout: float = 5.0) -> None:
        """Write what is queued (waiting up to ``timeout`` through a Redis outage), then stop."""
        try:
            self._queue.put(None, timeout=timeout)
        except queue.Full:  # Redis has been away long enough to fill the queue: give up on it
            self._stopping.set()
        self._thread.join(timeout)
        self._stopping.set()
        self._thread.join(1.0)

    def _take(self) -> tuple[list[_Item], bool]:
        first = self._queue.get()
        if first is None:
            return [], True
        items = [first]
        while len(items) < BATCH:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is None:
                return items, True
            items.append(item)
        return items, False

    def _write(self, items: list[_Item]) -> None:
        by_lab: dict[str, list[_Item]] = {}
        for item in items:
            by_lab.setdefault(item.lab_id, []).append(item)
        pipe = self.r.pipeline(transaction=False)
        for lab_id, lab_items in by_lab.items():
            key = streams.lab_stream(lab_id)
            publish(pipe, key, [i.msg for i in lab_items], self.maxlen)
            pipe.pexpire(key, lab_items[-1].ttl_ms)
        pipe.execute()
        self.written += len(items)

    def _run(self) -> None:
        done = False
        while not done:
            items, done = self._take()
            delay = 0.05
            while items:
                try:
                    self._write(items)
                    break
                except REDIS_ERRORS as exc:
                    if self._stopping.is_set():
                        log.error("lab outbox: redis unavailable at stop; %d messages lost", len(items))
                        return
                    log.warning("lab outbox: redis unavailable (%s); retrying in %.2fs", exc, delay)
                    self._stopping.wait(delay)
                    delay = min(delay * 2, 2.0)
