"""deploy/SCALING.md section 2 on a real three-node Redis Cluster: the matcher's commit (events to a
gateway's stream + acknowledgement of its orders stream, one MULTI) is refused across slots, and the
same commit works once the events stream carries the shard's hash tag; a real matcher process runs
on the cluster, every commit in its shard's slot."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis
from redis.cluster import ClusterNode, RedisCluster
from redis.crc import key_slot

from shared import streams
from shared.bus import Effects, StreamConsumer, publish, read_streams, read_streams_async
from shared.redis_cluster import LocalCluster
from shared.schema import (
    Accepted,
    Filled,
    ImageRequest,
    MatcherSnapshot,
    NewOrder,
    Trade,
    decode,
    decode_batch,
)
from tests.helpers import eventually

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("faults")]

if shutil.which("redis-cli") is None or shutil.which("redis-server") is None:
    pytest.skip("redis-server and redis-cli are needed to build a cluster", allow_module_level=True)


ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def local_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """Three primaries on free ports, all 16384 slots assigned (one cluster for this module)."""
    with LocalCluster(tmp_path_factory.mktemp("cluster"), masters=3) as local:
        yield local


@pytest.fixture(scope="module")
def cluster_nodes(local_cluster: LocalCluster) -> Iterator[RedisCluster]:
    client = RedisCluster(startup_nodes=[ClusterNode("127.0.0.1", local_cluster.first_port)])
    yield client
    client.close()


@pytest.fixture
def cluster(cluster_nodes: RedisCluster) -> RedisCluster:
    """The module's cluster, emptied before each test."""
    cluster_nodes.flushall(target_nodes=RedisCluster.PRIMARIES)
    return cluster_nodes


def _order(i: int) -> NewOrder:
    return NewOrder("CLIENT01", f"c{i}", "ACORN.LAB", 1, 10000, 1, 0, "gw1", i, i)


def _event(i: int) -> Accepted:
    return Accepted("CLIENT01", f"c{i}", f"O{i}", "ACORN.LAB", 1, 10000, 1, 0, f"E{i}", i)


def _consume_one(rc: RedisCluster, events_stream: str) -> StreamConsumer:
    """Read one order as the matcher does and commit its event with the acknowledgement."""
    orders = streams.orders_stream("a")
    publish(rc, orders, [_order(1)], 1000)
    consumer = StreamConsumer(rc, orders, streams.MATCHER_GROUP, "matcher-a")  # type: ignore[arg-type]
    consumer.ensure()
    batch = consumer.read()
    assert len(batch) == 1
    effects = Effects()
    effects.add(events_stream, _event(1))
    consumer.commit([entry_id for entry_id, _ in batch], effects)
    return consumer


def test_todays_commit_spans_slots_and_a_cluster_refuses_it(cluster: RedisCluster) -> None:
    events = streams.events_stream("gw1")
    assert key_slot(events.encode()) != key_slot(streams.orders_stream("a").encode())
    with pytest.raises(redis.exceptions.RedisClusterException):
        _consume_one(cluster, events)
    assert cluster.xlen(events) == 0  # nothing half-published
    pending = cluster.xpending(streams.orders_stream("a"), streams.MATCHER_GROUP)
    assert pending["pending"] == 1  # and the order is still there to be read again


def test_the_server_refuses_a_cross_slot_multi_even_on_one_node(cluster: RedisCluster) -> None:
    # Not just the client library: find a gateway whose events stream lives on the shard's node
    # but in another slot, and send the MULTI to that node directly.
    orders = streams.orders_stream("a")
    node = cluster.get_node_from_key(orders)
    gw = next(f"gw{i}" for i in range(1000)
              if cluster.get_node_from_key(streams.events_stream(f"gw{i}")).name == node.name)
    r = redis.Redis(host=node.host, port=node.port)
    pipe = r.pipeline(transaction=True)
    pipe.xadd(streams.events_stream(gw), {b"b": b"x"})
    pipe.xadd(orders, {b"b": b"y"})
    with pytest.raises(redis.ResponseError, match=r"same slot|CROSSSLOT|EXECABORT"):
        pipe.execute()
    r.close()


def test_events_in_the_shards_slot_make_the_same_commit_work(cluster: RedisCluster) -> None:
    events = streams.shard_events_stream("a", "gw1")
    keys = [events, streams.orders_stream("a"), streams.snapshot_key("a"),
            streams.applied_key(streams.orders_stream("a"), streams.MATCHER_GROUP)]
    assert len({key_slot(k.encode()) for k in keys}) == 1
    consumer = _consume_one(cluster, events)
    assert cluster.xlen(events) == 1
    assert cluster.xpending(streams.orders_stream("a"), streams.MATCHER_GROUP)["pending"] == 0
    last = cluster.xrange(streams.orders_stream("a"))[-1][0]
    assert consumer.already_applied(last)


# ---------------------------------------------------------------------- a matcher process on the cluster

def _matcher(url: str, tmp_path: Path) -> subprocess.Popen[bytes]:
    """``python -m services.matcher`` for shard a (which holds ACORN.LAB) on the cluster at ``url``."""
    env = {**os.environ, "REDIS_URL": url, "FIXLAB_MATCHER_SHARD": "a", "FIXLAB_SHARDS": "ACORN.LAB:a",
           "FIXLAB_PRO_RATA": "", "FIXLAB_MATCHER_BLOCK_MS": "50", "FIXLAB_MATCHER_HEALTH_SECONDS": "0.2",
           "FIXLAB_MATCHER_BATCH": "2", "FIXLAB_MATCHER_SNAPSHOT_EVERY": "3", "PYTHONUNBUFFERED": "1"}
    with (tmp_path / "matcher.log").open("ab") as log:  # the child has its own copy of the descriptor
        return subprocess.Popen([sys.executable, "-m", "services.matcher"], cwd=ROOT, env=env,
                                stdout=log, stderr=subprocess.STDOUT)


def _applied(rc: RedisCluster) -> bytes | None:
    raw: Any = rc.get(streams.applied_key(streams.orders_stream("a"), streams.MATCHER_GROUP))
    return raw  # type: ignore[no-any-return]


def _messages(rc: RedisCluster, stream: str) -> list[Any]:
    rows: Any = rc.xrange(stream)
    return [m for _, fields in rows for m in decode_batch(fields[streams.BATCH_FIELD])]


def _wait_applied(rc: RedisCluster, proc: subprocess.Popen[bytes], last: bytes, tmp_path: Path) -> None:
    def done() -> bool:
        assert proc.poll() is None, (tmp_path / "matcher.log").read_text(errors="replace")[-3000:]
        return _applied(rc) == last

    eventually(done, timeout=30, what="every order applied by the matcher on the cluster")


def _stop(proc: subprocess.Popen[bytes]) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait(5)


@pytest.mark.parametrize("named", ["every master", "the shard's node"])
def test_a_matcher_process_on_the_cluster_commits_in_its_shards_slot(
        cluster: RedisCluster, local_cluster: LocalCluster, tmp_path: Path, named: str) -> None:
    # REDIS_URL names every master, or only the node that holds the shard's slot (one node in cluster
    # mode). Before, a matcher took neither: the node list was no URL to it, and on the one node its
    # health key was MOVED, its first commit CROSSSLOT (test_todays_commit_spans_slots...).
    orders, events = streams.orders_stream("a"), streams.shard_events_stream("a", "gw1")
    node = cluster.get_node_from_key(orders)
    url = local_cluster.url if named == "every master" else f"redis://{node.host}:{node.port}/0"
    market, dead = streams.shard_market_stream("a"), streams.shard_deadletter_stream("a")
    snapshot = streams.snapshot_key("a")
    written = [k.encode() for k in (orders, events, market, dead, snapshot,
                                    streams.applied_key(orders, streams.MATCHER_GROUP))]
    assert len({key_slot(k) for k in written}) == 1
    assert len({cluster.get_node_from_key(k).name for k in (orders, streams.events_stream("gw1"),
                                                           "fixlab:market", "fixlab:deadletter")}) > 1
    buy = NewOrder("CLIENT01", "b1", "ACORN.LAB", 1, 10000, 5, 0, "gw1", 1, 1)
    sell = NewOrder("CLIENT02", "s1", "ACORN.LAB", 2, 10000, 3, 0, "gw1", 1, 2)
    bad = NewOrder("CLIENT01", "x", "ACORN.LAB", 1, "99.9", 1, 0, "gw1", 2, 3)  # type: ignore[arg-type]
    publish(cluster, orders, [buy], 1000)
    publish(cluster, orders, [sell, bad], 1000)
    last = publish(cluster, orders, [ImageRequest("gw1", 4)], 1000)
    proc = _matcher(url, tmp_path)
    try:
        _wait_applied(cluster, proc, last, tmp_path)
        # Events for the gateway, market data and the dead letter: all in the shard's slot.
        got = _messages(cluster, events)
        assert {(type(m).__name__, m.clordid) for m in got if isinstance(m, Accepted | Filled)} == {
            ("Accepted", "b1"), ("Accepted", "s1"), ("Filled", "b1"), ("Filled", "s1")}
        assert [(t.price, t.qty) for t in _messages(cluster, market) if isinstance(t, Trade)] == [(10000, 3)]
        (row,) = [fields for _, fields in cluster.xrange(dead)]
        assert row[b"stream"] == orders.encode() and b"price" in row[b"reason"]
        assert cluster.xpending(orders, streams.MATCHER_GROUP)["pending"] == 0
        # A snapshot (every 3 commands) was stored in the same transactions.
        snap = decode(cluster.get(snapshot))  # type: ignore[arg-type]
        assert isinstance(snap, MatcherSnapshot) and snap.shard == "a"
        assert cluster.exists(streams.health_key("matcher", "a"))
        assert not any(cluster.exists(k) for k in (streams.events_stream("gw1"), "fixlab:market",
                                                   "fixlab:deadletter"))
        assert _stop(proc) == 0
        # A clean stop's final snapshot covers the last entry; a new process continues from it.
        final = decode(cluster.get(snapshot))  # type: ignore[arg-type]
        assert isinstance(final, MatcherSnapshot) and final.last_id == last.decode()
        sell_more = NewOrder("CLIENT02", "s2", "ACORN.LAB", 2, 10000, 2, 0, "gw1", 3, 5)
        more = publish(cluster, orders, [sell_more], 1000)
        proc = _matcher(url, tmp_path)
        _wait_applied(cluster, proc, more, tmp_path)
        fills = [m for m in _messages(cluster, events) if isinstance(m, Filled) and m.clordid == "b1"]
        assert [f.leaves_qty for f in fills] == [2, 0]  # the restarted book still held b1's remaining 2
    finally:
        assert _stop(proc) == 0, (tmp_path / "matcher.log").read_text(errors="replace")[-3000:]


# ---------------------------------------------------------------------- readers of every shard

def _market_streams_on_every_node(rc: RedisCluster) -> dict[str, bytes]:
    """Shards whose market streams sit on all three masters, one Trade each: stream -> its entry id."""
    out: dict[str, bytes] = {}
    nodes: set[str] = set()
    for i in range(64):
        name = streams.shard_market_stream(f"s{i}")
        out[name] = publish(rc, name, [Trade("ACORN.LAB", 10000, i + 1, f"M{i}", 1, i)], 1000)
        nodes.add(rc.get_node_from_key(name).name)
        if len(nodes) == 3 and len(out) >= 4:
            return out
    raise AssertionError("no shard names spread over the three masters")


def _qty(rows: Any) -> dict[bytes, list[int]]:
    return {name: [m.qty for _, f in entries for m in decode_batch(f[streams.BATCH_FIELD])]
            for name, entries in rows}


def test_reading_every_shards_market_stream_is_one_xread_per_stream_on_a_cluster(
        cluster: RedisCluster) -> None:
    ids = _market_streams_on_every_node(cluster)
    with pytest.raises(redis.exceptions.RedisClusterException):
        cluster.xread(dict.fromkeys(ids, "0-0"))  # one command over several slots: refused
    got = _qty(read_streams(cluster, dict.fromkeys(ids, "0-0"), 100))
    assert got == {name.encode(): [i + 1] for i, name in enumerate(ids)}
    assert read_streams(cluster, ids, 100) == []  # after each stream's last id: nothing


def test_the_asyncio_reader_of_every_shard_on_a_cluster(cluster: RedisCluster,
                                                         local_cluster: LocalCluster) -> None:
    ids = _market_streams_on_every_node(cluster)

    async def read() -> tuple[Any, Any]:
        ac = aioredis.RedisCluster(host="127.0.0.1", port=local_cluster.first_port)
        try:
            return (await read_streams_async(ac, dict.fromkeys(ids, "0-0"), 100, 1000),
                    await read_streams_async(ac, ids, 100, 1000))
        finally:
            await ac.aclose()

    everything, nothing = asyncio.run(read())
    assert _qty(everything) == {name.encode(): [i + 1] for i, name in enumerate(ids)}
    assert nothing == []
