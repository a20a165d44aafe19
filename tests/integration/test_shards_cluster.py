"""deploy/SCALING.md section 2 on a real three-node Redis Cluster: the matcher's commit (events to a
gateway's stream + acknowledgement of its orders stream, one MULTI) is refused across slots, and the
same commit works once the events stream carries the shard's hash tag."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest
import redis
from redis.cluster import ClusterNode, RedisCluster
from redis.crc import key_slot

from shared import streams
from shared.bus import Effects, StreamConsumer, publish
from shared.redis_cluster import LocalCluster
from shared.schema import Accepted, NewOrder

pytestmark = pytest.mark.integration

if shutil.which("redis-cli") is None or shutil.which("redis-server") is None:
    pytest.skip("redis-server and redis-cli are needed to build a cluster", allow_module_level=True)


@pytest.fixture(scope="module")
def cluster_nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisCluster]:
    """Three primaries on free ports, all 16384 slots assigned (one cluster for this module)."""
    with LocalCluster(tmp_path_factory.mktemp("cluster"), masters=3) as local:
        client = RedisCluster(startup_nodes=[ClusterNode("127.0.0.1", local.first_port)])
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
