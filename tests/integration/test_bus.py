"""The consumer loop against a real redis-server: pending first, atomic ack, dead letters."""

from __future__ import annotations

import threading

import pytest
import redis

from shared import bus, streams
from shared.bus import Effects, StreamConsumer
from shared.schema import SessionEnded, Trade, decode_batch

pytestmark = pytest.mark.integration


def _trade(n: int) -> Trade:
    return Trade("ACORN.LAB", 10000, n, f"M{n}", 1, n)


def test_effects_and_ack_are_one_transaction(redis_url: str) -> None:
    r = bus.connect(redis_url)
    bus.publish(r, "in", [_trade(1), _trade(2)], 1000)
    consumer = StreamConsumer(r, "in", "g", "c1")
    consumer.ensure()
    batch = consumer.read()
    assert [m for _, msgs in batch for m in msgs] == [_trade(1), _trade(2)]
    effects = Effects()
    effects.add("out", SessionEnded("S", "gw", 1))
    consumer.commit([i for i, _ in batch], effects)
    assert r.xpending("in", "g")["pending"] == 0
    [(_, fields)] = r.xrange("out")
    assert decode_batch(fields[streams.BATCH_FIELD]) == [SessionEnded("S", "gw", 1)]
    assert consumer.already_applied(batch[-1][0])


def test_pending_entries_are_read_first_after_restart(redis_url: str) -> None:
    r = bus.connect(redis_url)
    for n in range(3):
        bus.publish(r, "in", [_trade(n)], 1000)
    first = StreamConsumer(r, "in", "g", "c1", count=2)
    first.ensure()
    unacked = first.read()  # read, then "crash" before acknowledging
    assert len(unacked) == 2
    again = StreamConsumer(r, "in", "g", "c1", count=10)
    assert [i for i, _ in again.read()] == [i for i, _ in unacked]
    again.commit([i for i, _ in unacked], None)
    rest = again.read()
    assert [m.qty for _, msgs in rest for m in msgs] == [2]  # type: ignore[attr-defined]


def test_undecodable_entries_go_to_dead_letters(redis_url: str) -> None:
    r = bus.connect(redis_url)
    r.xadd("in", {streams.BATCH_FIELD: b"\xc1garbage"})
    r.xadd("in", {b"other": b"x"})
    bus.publish(r, "in", [_trade(9)], 1000)
    consumer = StreamConsumer(r, "in", "g", "c1")
    consumer.ensure()
    batch = consumer.read()
    assert [m for _, msgs in batch for m in msgs] == [_trade(9)]
    assert r.xlen(streams.DEADLETTER_STREAM) == 2
    assert consumer.deadlettered == 2


def test_run_survives_a_redis_restart(fresh_redis) -> None:  # type: ignore[no-untyped-def]
    r = bus.connect(fresh_redis.url, timeout_s=1)
    bus.publish(r, "in", [_trade(1)], 1000)
    seen: list[int] = []
    stop = threading.Event()

    def handle(batch: list[bus.Entry]) -> Effects:
        seen.extend(m.qty for _, msgs in batch for m in msgs)  # type: ignore[attr-defined]
        return Effects()

    consumer = StreamConsumer(r, "in", "g", "c1", block_ms=100)
    worker = threading.Thread(target=consumer.run, args=(handle, stop))
    worker.start()
    try:
        from tests.helpers import eventually

        eventually(lambda: seen == [1])
        fresh_redis.stop()  # AOF on: the stream and group survive
        fresh_redis.start()
        bus.publish(bus.connect(fresh_redis.url), "in", [_trade(2)], 1000)
        eventually(lambda: seen == [1, 2], timeout=15)
    finally:
        stop.set()
        worker.join(5)
    assert not worker.is_alive()
    assert r.xpending("in", "g")["pending"] == 0
    with pytest.raises(redis.ResponseError):
        r.xgroup_create("in", "g", id="0")


def test_read_streams_reads_several_streams_after_each_ones_last_id(redis_url: str) -> None:
    r = bus.connect(redis_url)
    a = [bus.publish(r, "m:a", [_trade(n)], 1000) for n in (1, 2)]
    bus.publish(r, "m:b", [_trade(3)], 1000)
    rows = bus.read_streams(r, {"m:a": a[0], "m:b": "0-0", "m:none": "0-0"}, 100)
    got = {name: [m.qty for _, f in entries for m in decode_batch(f[streams.BATCH_FIELD])]  # type: ignore[attr-defined]
           for name, entries in rows}
    assert got == {b"m:a": [2], b"m:b": [3]}  # a stream with nothing new is left out
    assert bus.read_streams(r, {"m:a": a[1]}, 100) == []
