"""LeanStreamConsumer (and LeanMultiStreamConsumer, the same on several streams) against a real
redis-server: the bus's guarantees, commit and next read in one write.

A tap on the TCP path cuts the consumer's connection at the worst moments (a transaction sent but
not run; run but its reply lost, with entries claimed by the read that went with it), so the retry
logic is proved with real sockets: every effect published exactly once, every entry acknowledged.
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlparse

import pytest
import redis

from shared import bus, streams
from shared.bus import Effects
from shared.bus_lean import LeanMultiStreamConsumer, LeanStreamConsumer
from shared.redis_server import RedisServer
from shared.resp import RespConnection
from shared.schema import SessionEnded, Trade, decode_batch
from tests.helpers import eventually

pytestmark = pytest.mark.integration


def _trade(n: int) -> Trade:
    return Trade("ACORN.LAB", 10000, n, f"M{n}", 1, n)


def consumer_for(url: str, **kw: Any) -> LeanStreamConsumer:
    return LeanStreamConsumer(bus.connect(url), RespConnection(url), "in", "g", "c1", **kw)


def published(r: redis.Redis, stream: str = "out") -> list[int]:
    rows: Any = r.xrange(stream)
    return [m.qty for _, f in rows for m in decode_batch(f[streams.BATCH_FIELD])]  # type: ignore[attr-defined]


class Loop:
    """A consumer's run() on a thread; the handler republishes each trade's qty to "out"."""

    def __init__(self, consumer: LeanStreamConsumer | LeanMultiStreamConsumer) -> None:
        self.consumer = consumer
        self.seen: list[int] = []
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def handle(self, batch: list[bus.Entry]) -> Effects:
        effects = Effects()
        for _, msgs in batch:
            for m in msgs:
                self.seen.append(m.qty)  # type: ignore[attr-defined]
                effects.add("out", m)
        return effects

    def _run(self) -> None:
        try:
            self.consumer.run(self.handle, self.stop)
        except BaseException as exc:  # surfaced by __exit__
            self.error = exc

    def __enter__(self) -> Loop:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        self.thread.join(10)
        assert not self.thread.is_alive()
        if self.error is not None:
            raise self.error


def test_commit_and_read_are_the_base_class_api(redis_url: str) -> None:
    r = bus.connect(redis_url)
    for n in range(3):
        bus.publish(r, "in", [_trade(n)], 1000)
    first = consumer_for(redis_url, count=2)
    first.ensure()
    unacked = first.read()  # read, then "crash" before acknowledging
    assert [m.qty for _, msgs in unacked for m in msgs] == [0, 1]  # type: ignore[attr-defined]
    again = consumer_for(redis_url, count=10)
    assert [i for i, _ in again.read()] == [i for i, _ in unacked]  # pending entries first
    effects = Effects()
    effects.add("out", SessionEnded("S", "gw", 1))
    again.commit([i for i, _ in unacked], effects)
    assert r.xpending("in", "g")["pending"] == 0
    rows: Any = r.xrange("out")
    assert decode_batch(rows[0][1][streams.BATCH_FIELD]) == [SessionEnded("S", "gw", 1)]
    assert again.already_applied(unacked[-1][0])
    assert [m.qty for _, msgs in again.read() for m in msgs] == [2]  # type: ignore[attr-defined]
    first.conn.close()
    again.conn.close()


def test_run_publishes_each_batch_once_and_acknowledges_everything(redis_url: str) -> None:
    r = bus.connect(redis_url)
    r.xadd("in", {streams.BATCH_FIELD: b"\xc1garbage"})
    with Loop(consumer_for(redis_url, count=3, block_ms=50)) as loop:
        for n in range(1, 41):
            bus.publish(r, "in", [_trade(n)], 1000)
        last: Any = r.xrevrange("in", count=1)
        eventually(lambda: loop.consumer.already_applied(last[0][0]), what="all applied")
    assert loop.seen == list(range(1, 41))
    assert published(r) == list(range(1, 41))
    assert r.xpending("in", "g")["pending"] == 0
    assert loop.consumer.consumed == 40
    assert loop.consumer.deadlettered == 1
    assert r.xlen(streams.DEADLETTER_STREAM) == 1
    assert loop.consumer.conn.sock is None  # run() closed its connection


def test_stopping_commits_the_batch_in_hand(redis_url: str) -> None:
    r = bus.connect(redis_url)
    bus.publish(r, "in", [_trade(7)], 1000)
    consumer = consumer_for(redis_url)
    stop = threading.Event()

    def handle(batch: list[bus.Entry]) -> Effects:
        stop.set()  # its commit would otherwise wait for the next read
        effects = Effects()
        effects.add("out", batch[0][1][0])
        return effects

    consumer.run(handle, stop)
    assert published(r) == [7]
    assert r.xpending("in", "g")["pending"] == 0


def test_an_error_inside_the_transaction_stops_the_loop(redis_url: str) -> None:
    r = bus.connect(redis_url)
    r.set("out", b"not a stream")
    bus.publish(r, "in", [_trade(1)], 1000)
    loop = Loop(consumer_for(redis_url, block_ms=50))
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"), loop:
        eventually(lambda: not loop.thread.is_alive(), what="the loop stopping")
    assert loop.seen == [1]


def test_a_lost_group_is_created_again(redis_url: str) -> None:
    r = bus.connect(redis_url)
    with Loop(consumer_for(redis_url, block_ms=50)) as loop:
        bus.publish(r, "in", [_trade(1)], 1000)
        eventually(lambda: loop.seen == [1], what="first entry")
        r.xgroup_destroy("in", "g")
        bus.publish(r, "in", [_trade(2)], 1000)
        eventually(lambda: loop.seen[-1:] == [2], what="an entry after the group came back")
    assert r.xpending("in", "g")["pending"] == 0


def test_run_survives_a_redis_restart(fresh_redis: RedisServer) -> None:
    r = bus.connect(fresh_redis.url, timeout_s=1)
    bus.publish(r, "in", [_trade(1)], 1000)
    consumer = LeanStreamConsumer(r, RespConnection(fresh_redis.url, timeout_s=1), "in", "g", "c1",
                                  block_ms=100)
    with Loop(consumer) as loop:
        eventually(lambda: loop.seen == [1])
        fresh_redis.stop()  # AOF on: the stream and group survive
        fresh_redis.start()
        bus.publish(bus.connect(fresh_redis.url), "in", [_trade(2)], 1000)
        eventually(lambda: loop.seen == [1, 2], timeout=15)
    assert published(r) == [1, 2]
    assert r.xpending("in", "g")["pending"] == 0


# --------------------------------------------------------------------------- a tap that cuts

class Tap:
    """A TCP relay to Redis that can cut the connection around the next EXEC.

    ``cut("before")``: the chunk holding EXEC is dropped and both sides closed (the transaction
    never runs). ``cut("after")``: the chunk is forwarded, Redis's reply is awaited and dropped,
    then both sides are closed (the transaction ran; the client cannot know).
    """

    def __init__(self, upstream: str) -> None:
        u = urlparse(upstream)
        self.upstream = (u.hostname or "127.0.0.1", u.port or 6379)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.05)  # accept() wakes up to see close()
        self.url = f"redis://127.0.0.1:{self.listener.getsockname()[1]}/0"
        self.mode: str | None = None
        self.cuts = 0
        self._closing = False
        self._socks: list[socket.socket] = []
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()

    def cut(self, mode: str) -> None:
        self.mode = mode

    def _accept(self) -> None:
        while not self._closing:
            try:
                client, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            server = socket.create_connection(self.upstream)
            self._socks += [client, server]
            t = threading.Thread(target=self._relay, args=(client, server), daemon=True)
            self._threads.append(t)
            t.start()

    def _relay(self, client: socket.socket, server: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while not self._closing:
                ready, _, _ = select.select([client, server], [], [], 0.05)
                for s in ready:
                    data = s.recv(65536)
                    if not data:
                        return self._drop(client, server)
                    if s is client and self.mode and b"EXEC\r\n" in data:
                        mode, self.mode = self.mode, None
                        self.cuts += 1
                        if mode == "after":
                            server.sendall(data)
                            server.recv(65536)  # Redis ran it: its replies are written together
                        return self._drop(client, server)
                    (server if s is client else client).sendall(data)
        self._drop(client, server)

    @staticmethod
    def _drop(*socks: socket.socket) -> None:
        for s in socks:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def close(self) -> None:
        self._closing = True
        self.listener.close()
        for t in self._threads:
            t.join(5)
        self._drop(*self._socks)


@pytest.fixture
def tap(redis_url: str) -> Iterator[Tap]:
    t = Tap(redis_url)
    try:
        yield t
    finally:
        t.close()


@pytest.mark.parametrize("mode", ["before", "after"])
def test_a_commit_cut_off_is_published_exactly_once(redis_url: str, tap: Tap, mode: str) -> None:
    r = bus.connect(redis_url)  # the applied-id check goes straight to Redis, not through the tap
    consumer = LeanStreamConsumer(r, RespConnection(tap.url, timeout_s=2), "in", "g", "c1", count=1,
                                  block_ms=50)
    for n in (1, 2, 3):
        bus.publish(r, "in", [_trade(n)], 1000)
    with Loop(consumer) as loop:
        eventually(lambda: loop.seen == [1, 2, 3], what="the first entries")
        # Two entries waiting: the read sent with the commit of 4 claims 5, and its reply is lost
        # with the commit's; 5 must come back as a pending entry.
        tap.cut(mode)
        pipe = r.pipeline(transaction=True)  # all three there before the blocked read is served
        for n in (4, 5, 6):
            bus.publish(pipe, "in", [_trade(n)], 1000)
        pipe.execute()
        eventually(lambda: published(r) == [1, 2, 3, 4, 5, 6], what="every trade published once")
        eventually(lambda: r.xpending("in", "g")["pending"] == 0, what="every entry acknowledged")
    assert tap.cuts == 1
    assert loop.seen == [1, 2, 3, 4, 5, 6]  # a retried commit does not handle its batch again
    assert published(r) == [1, 2, 3, 4, 5, 6]


# --------------------------------------------------------------------------- several streams

def multi_for(url: str, names: list[str], **kw: Any) -> LeanMultiStreamConsumer:
    return LeanMultiStreamConsumer(bus.connect(url), RespConnection(url), names, "g", "c1", **kw)


def test_several_streams_each_in_order_each_with_its_applied_id(redis_url: str) -> None:
    r = bus.connect(redis_url)
    for n in range(1, 4):
        bus.publish(r, "in:a", [_trade(n)], 1000)
    crashed = LeanStreamConsumer(r, RespConnection(redis_url), "in:a", "g", "c1", count=2)
    crashed.ensure()
    assert len(crashed.read()) == 2  # 1 and 2 claimed, never acknowledged: pending for c1
    crashed.conn.close()
    r.xadd("in:b", {streams.BATCH_FIELD: b"\xc1garbage"})
    with Loop(multi_for(redis_url, ["in:a", "in:b"], count=3, block_ms=50)) as loop:
        for n in range(4, 21):
            bus.publish(r, "in:a", [_trade(n)], 1000)
            bus.publish(r, "in:b", [_trade(100 + n)], 1000)
        eventually(lambda: len(loop.seen) == 37, what="every entry of both streams")
        for stream in ("in:a", "in:b"):
            last: Any = r.xrevrange(stream, count=1)
            eventually(lambda last=last, stream=stream: r.get(streams.applied_key(stream, "g")) == last[0][0],
                       what=f"{stream}'s own applied id")
            assert r.xpending(stream, "g")["pending"] == 0
    assert [q for q in loop.seen if q < 100] == list(range(1, 21))  # the pending ones first, in order
    assert [q for q in loop.seen if q > 100] == list(range(104, 121))
    assert sorted(published(r)) == sorted(loop.seen)
    assert loop.consumer.consumed == 37 and loop.consumer.deadlettered == 1
    (dead,) = [f for _, f in r.xrange(streams.DEADLETTER_STREAM)]
    assert dead[b"stream"] == b"in:b"


def test_several_streams_a_lost_group_is_created_again(redis_url: str) -> None:
    r = bus.connect(redis_url)
    with Loop(multi_for(redis_url, ["in:a", "in:b"], block_ms=50)) as loop:
        bus.publish(r, "in:b", [_trade(1)], 1000)
        eventually(lambda: loop.seen == [1], what="first entry")
        r.xgroup_destroy("in:a", "g")
        bus.publish(r, "in:a", [_trade(2)], 1000)
        eventually(lambda: loop.seen[-1:] == [2], what="an entry after the group came back")
    assert r.xpending("in:a", "g")["pending"] == r.xpending("in:b", "g")["pending"] == 0


@pytest.mark.parametrize("mode", ["before", "after"])
def test_several_streams_commits_cut_off_are_published_exactly_once(redis_url: str, tap: Tap,
                                                                    mode: str) -> None:
    r = bus.connect(redis_url)
    consumer = LeanMultiStreamConsumer(r, RespConnection(tap.url, timeout_s=2), ["in:a", "in:b"], "g", "c1",
                                       count=1, block_ms=50)
    bus.publish(r, "in:a", [_trade(1)], 1000)
    with Loop(consumer) as loop:
        eventually(lambda: loop.seen == [1], what="the first entry")
        tap.cut(mode)  # both streams' commits go out in the write that is cut
        pipe = r.pipeline(transaction=True)
        for stream, n in (("in:a", 2), ("in:b", 3), ("in:a", 4), ("in:b", 5)):
            bus.publish(pipe, stream, [_trade(n)], 1000)
        pipe.execute()
        eventually(lambda: sorted(published(r)) == [1, 2, 3, 4, 5], what="every trade published once")
        for stream in ("in:a", "in:b"):
            eventually(lambda stream=stream: r.xpending(stream, "g")["pending"] == 0,
                       what=f"{stream} acknowledged")
    assert tap.cuts == 1
    assert sorted(loop.seen) == [1, 2, 3, 4, 5]  # a retried commit does not handle its batch again
    assert [q for q in loop.seen if q % 2 == 0] == [2, 4] and [q for q in loop.seen if q in (3, 5)] == [3, 5]
