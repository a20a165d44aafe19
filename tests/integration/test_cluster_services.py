"""The services' Redis pieces on a real three-master Redis Cluster, each transaction in one slot:
the gateway's intake (one transaction per destination, a done count in each, and a takeover that
completes a half-published batch without doubling it), its events thread's consumer (one stream per
command), and a consumer whose dead letters live in another slot (the lab manager's)."""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
from redis.cluster import ClusterNode, RedisCluster

from services.gateway.config import gateway_settings
from services.gateway.inbound import Inbound
from services.gateway.intake import Publisher
from services.gateway.lab import LabManager
from services.gateway.publisher import IntakeLoop
from services.gateway.records import fix_record
from services.gateway.slots import ClusterIntake, done_keys
from shared import streams
from shared.bus import Entry, StreamConsumer, connect, publish
from shared.bus_cluster import ClusterMultiStreamConsumer
from shared.config import Instrument
from shared.redis_cluster import LocalCluster
from shared.schema import Accepted, LabStart, NewOrder, Refused, SessionEnded, decode_wire_batch
from tests.helpers import eventually

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("faults")]

if shutil.which("redis-cli") is None or shutil.which("redis-server") is None:
    pytest.skip("redis-server and redis-cli are needed to build a cluster", allow_module_level=True)

INSTS = [Instrument("ACORN.LAB", 10_000, Decimal("0.01"), "a"),
         Instrument("BIRCH.LAB", 2_500, Decimal("0.01"), "b")]
A, B = streams.orders_stream("a"), streams.orders_stream("b")
EVENTS = streams.events_stream("gw")
NOS = "35=D\x0149=S\x0134={}\x0111={}\x0155={}\x0154=1\x0138=1\x0140=2\x0144={}\x01"


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("cluster"), masters=3) as cluster:
        yield cluster


@pytest.fixture
def rc(local: LocalCluster) -> Iterator[RedisCluster]:
    client = RedisCluster(startup_nodes=[ClusterNode("127.0.0.1", local.first_port)])
    client.flushall(target_nodes=RedisCluster.PRIMARIES)
    yield client
    client.close()


def ids_of(rc: RedisCluster, stream: str) -> list[str]:
    """The ClOrdIDs (or "ended") of every command on ``stream``, in order."""
    rows: Any = rc.xrange(stream)
    return [w[2] if w[0] != SessionEnded.CODE else "ended"
            for _id, f in rows for w in decode_wire_batch(f[streams.BATCH_FIELD])]


def _pending(rc: RedisCluster, stream: str) -> int:
    summary: Any = rc.xpending(stream, streams.GATEWAY_GROUP)
    return int(summary["pending"])


@pytest.mark.parametrize("lean", [False, True], ids=["redis-py", "lean"])
def test_the_intake_writes_each_destination_in_its_own_transaction(rc: RedisCluster, lean: bool) -> None:
    keys = done_keys(INSTS, "gw", "r1")
    intake = ClusterIntake(rc, keys, lean=lean)
    publisher = Publisher(intake, Inbound(INSTS, "gw"), INSTS, 1000, keys[EVENTS])
    batch = [(NOS.format(2, "a1", "ACORN.LAB", "100.00"), 1), (NOS.format(3, "b1", "BIRCH.LAB", "25.00"), 1),
             (NOS.format(4, "bad", "ACORN.LAB", "100.001"), 1)]
    assert publisher.publish(batch, 3)
    assert (ids_of(rc, A), ids_of(rc, B)) == (["a1"], ["b1"])
    assert len(list(rc.xrange(EVENTS) or [])) == 1  # the refusal, in the gateway's own slot
    assert {stream: rc.get(key) for stream, key in keys.items()} == {A: b"3", B: b"3", EVENTS: b"3"}
    assert rc.pttl(keys[A]) > 0  # kept a day, as on one Redis

    # One destination refused (a key of the wrong type): the others are applied, and only the
    # refused one is sent again.
    rc.delete(B)
    rc.set(B, "not a stream")
    batch = [(NOS.format(5, "a2", "ACORN.LAB", "100.00"), 1), (NOS.format(6, "b2", "BIRCH.LAB", "25.00"), 1)]
    assert not publisher.publish(batch, 5)
    assert ids_of(rc, A) == ["a1", "a2"] and rc.get(keys[B]) == b"3"
    rc.delete(B)
    assert publisher.publish(batch, 5)
    assert ids_of(rc, A) == ["a1", "a2"] and ids_of(rc, B) == ["b2"]
    assert rc.get(keys[A]) == rc.get(keys[B]) == b"5"
    if lean:  # each destination over its own connection, to its slot's master
        assert {s: c.address for s, c in intake._conns.items()} == {
            s: rc.get_node_from_key(s).name for s in (A, B, EVENTS)}
    intake.close()


def test_a_publisher_taking_over_completes_a_half_published_batch(rc: RedisCluster, local: LocalCluster
                                                                   ) -> None:
    # The predecessor of run r2 put records 1..3 on shard a, 1..1 on shard b, then died.
    keys = done_keys(INSTS, "gw1", "r2")
    rc.set(keys[A], 3)
    rc.set(keys[B], 1)
    settings = gateway_settings({"REDIS_URL": local.url, "FIXLAB_SHARDS": "ACORN.LAB:a,BIRCH.LAB:b"})
    r, w = os.pipe()
    try:
        intake = IntakeLoop(settings, "r2", 1, -1, w)
        assert intake.cluster is not None
        records = [NOS.format(2, "a1", "ACORN.LAB", "100.00"), NOS.format(3, "b1", "BIRCH.LAB", "25.00"),
                   NOS.format(4, "a2", "ACORN.LAB", "100.00"), NOS.format(5, "b2", "BIRCH.LAB", "25.00")]
        intake.take_records(b"".join(fix_record(f"8=FIX.4.4\x019=5\x01{x}10=000\x01".encode())
                                     for x in records))
        assert intake.next_batch() and intake.publish()
    finally:
        os.close(r)
        os.close(w)
        if intake.cluster is not None:
            intake.cluster.close()
    assert intake.skip_upto == 0  # nothing is on every destination: each one skips its own
    assert ids_of(rc, A) == []  # a1 and a2 were there already (records 1 and 3)
    assert ids_of(rc, B) == ["b1", "b2"]  # records 2 and 4: b had only record 1
    assert rc.get(keys[B]) == b"4"


@pytest.mark.parametrize("lean", [False, True], ids=["redis-py", "lean"])
def test_the_events_consumer_reads_each_stream_on_its_own_node(rc: RedisCluster, local: LocalCluster,
                                                               lean: bool) -> None:
    names = [streams.events_stream("gw1"), streams.shard_events_stream("a", "gw1"),
             streams.shard_events_stream("b", "gw1")]
    for i, name in enumerate(names):
        publish(rc, name, [Accepted("S", f"c{i}", "O", "ACORN.LAB", 1, 1, 1, 0, f"E{i}", i)], 1000)
    publish(rc, names[0], [Refused("S", "body", 9)], 1000)
    r = connect(local.url)
    consumer = ClusterMultiStreamConsumer(r, names, streams.GATEWAY_GROUP, "gw1", block_ms=100, lean=lean)
    if lean:  # one lean consumer per slot, each on a connection to its slot's master
        assert [type(lane).__name__ for lane in consumer.lanes] == ["LeanMultiStreamConsumer"] * 3
        assert {lane.conn.address for lane in consumer.lanes  # type: ignore[union-attr]
                } == {rc.get_node_from_key(n).name for n in names}
    got: list[tuple[str, Any]] = []
    inside = threading.Lock()
    overlaps: list[bool] = []

    def handle(batch: list[Entry]) -> None:
        overlaps.append(not inside.acquire(blocking=False))  # the handler is never entered twice
        try:
            got.extend((type(m).__name__, getattr(m, "clordid", "")) for _id, msgs in batch for m in msgs)
        finally:
            inside.release()

    stop = threading.Event()
    thread = threading.Thread(target=consumer.run, args=(handle, stop), daemon=True)
    thread.start()
    try:
        eventually(lambda: len(got) == 4, timeout=10, what="every event handled")
        publish(rc, names[2], [Accepted("S", "late", "O", "BIRCH.LAB", 1, 1, 1, 0, "E9", 9)], 1000)
        eventually(lambda: ("Accepted", "late") in got, timeout=10, what="a new event handled")
        for name in names:
            eventually(lambda n=name: _pending(rc, n) == 0, timeout=10, what=f"{name} acknowledged")
            assert rc.get(streams.applied_key(name, streams.GATEWAY_GROUP)) is not None
    finally:
        stop.set()
        thread.join(5)
    assert not thread.is_alive()
    assert sorted(got) == sorted([("Accepted", "c0"), ("Accepted", "c1"), ("Accepted", "c2"),
                                  ("Refused", ""), ("Accepted", "late")])
    assert not any(overlaps)
    assert consumer.consumed == 5


def test_dead_letters_in_another_slot_are_written_then_acknowledged(rc: RedisCluster, local: LocalCluster
                                                                      ) -> None:
    r = connect(local.url)
    consumer = StreamConsumer(r, streams.LAB_START_STREAM, streams.GATEWAY_GROUP, "gw1", block_ms=100)
    consumer.ensure()
    # An entry that does not decode: dead-lettered by the loop itself.
    rc.xadd(streams.LAB_START_STREAM, {streams.BATCH_FIELD: b"\xc1"})
    assert consumer.read() == []
    # One that decodes but is not a LabStart: the lab manager's own handler dead-letters it (an
    # effect "elsewhere": the dead-letter stream is in another slot than fixlab:lab:start).
    publish(rc, streams.LAB_START_STREAM, [NewOrder("S", "c", "ACORN.LAB", 1, 1, 1, 0, "gw1", 1, 1)], 1000)
    batch = consumer.read()
    [(entry_id, _msgs)] = batch
    effects = LabManager(local.url, "gw1", "127.0.0.1", 1)._on_starts(batch)
    assert effects.elsewhere and not effects.out
    consumer.commit([entry_id], effects)
    letters: Any = rc.xrange(streams.DEADLETTER_STREAM)
    assert [f[b"stream"] for _i, f in letters] == [streams.LAB_START_STREAM.encode()] * 2
    assert letters[1][1][b"id"] == entry_id and b"not a LabStart" in letters[1][1][b"reason"]
    assert _pending(rc, streams.LAB_START_STREAM) == 0
    assert rc.get(consumer.applied_key) == entry_id
    assert consumer.deadlettered == 1
    # A good LabStart goes through the same consumer untouched.
    publish(rc, streams.LAB_START_STREAM, [LabStart("lab1", "127.0.0.1", 1)], 1000)
    [(_id, [start])] = consumer.read()
    assert isinstance(start, LabStart)
