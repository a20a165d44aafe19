"""The lean (hiredis) path on a real Redis Cluster: a matcher's consumer talks straight to the master of
its shard's slot (shared.cluster_node.SlotConnection), and keeps going when the slot moves under it
(a resharding: MIGRATE of the shard's keys, then the slot handed over) or its master fails over to a
replica, with every order applied once: nothing lost, nothing doubled."""

from __future__ import annotations

import logging
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from redis.cluster import ClusterNode, RedisCluster
from redis.crc import key_slot

from services.gateway.slots import ClusterIntake
from services.matcher.config import load
from services.matcher.service import MatcherService
from shared import resp, streams
from shared.bus import Entry, publish
from shared.bus_cluster import ClusterMultiStreamConsumer
from shared.bus_lean import LeanStreamConsumer
from shared.cluster_node import SlotConnection
from shared.redis_cluster import LocalCluster
from shared.schema import Accepted, NewOrder, decode_batch, encode_batch
from tests.helpers import eventually

log = logging.getLogger(__name__)

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("faults")]

if shutil.which("redis-cli") is None or shutil.which("redis-server") is None:
    pytest.skip("redis-server and redis-cli are needed to build a cluster", allow_module_level=True)

ORDERS = streams.orders_stream("0")
EVENTS = streams.shard_events_stream("0", "gw1")
SLOT = key_slot(ORDERS.encode())


def _node_id(port: int) -> str:
    with redis.Redis(port=port) as c:
        return str(c.execute_command("CLUSTER", "MYID").decode())


def _owner_port(ports: list[int]) -> int:
    for port in ports:
        with redis.Redis(port=port) as c:
            rows: Any = c.execute_command("CLUSTER", "SLOTS")
            for start, end, master, *_ in rows:
                if start <= SLOT <= end:
                    return int(master[1])
    raise AssertionError(f"no node serves slot {SLOT}")


def _migrate_slot(source: int, target: int, masters: list[int]) -> None:
    """Move the shard's slot from one master to another, keys and all, as ``redis-cli --cluster
    reshard`` does for each slot: IMPORTING/MIGRATING, MIGRATE the keys, then SETSLOT NODE everywhere."""
    src, dst = redis.Redis(port=source), redis.Redis(port=target)
    try:
        src_id, dst_id = _node_id(source), _node_id(target)
        dst.execute_command("CLUSTER", "SETSLOT", SLOT, "IMPORTING", src_id)
        src.execute_command("CLUSTER", "SETSLOT", SLOT, "MIGRATING", dst_id)
        while True:
            keys: Any = src.execute_command("CLUSTER", "GETKEYSINSLOT", SLOT, 2)
            if not keys:
                break
            src.execute_command("MIGRATE", "127.0.0.1", target, "", 0, 5000, "KEYS", *keys)
            time.sleep(0.05)  # let the matcher run into the half-moved slot (ASK, TRYAGAIN)
        dst.execute_command("CLUSTER", "SETSLOT", SLOT, "NODE", dst_id)
        src.execute_command("CLUSTER", "SETSLOT", SLOT, "NODE", dst_id)
        for port in masters:
            if port not in (source, target):
                with redis.Redis(port=port) as c:
                    c.execute_command("CLUSTER", "SETSLOT", SLOT, "NODE", dst_id)
    finally:
        src.close()
        dst.close()


def _replica_of(local: LocalCluster, master: int) -> int:
    master_id = _node_id(master)
    for node in local.nodes:
        with redis.Redis(port=node.port) as c:
            info: Any = c.execute_command("CLUSTER", "NODES")
            me = next(line for line in info.decode().splitlines() if "myself" in line).split()
            if "slave" in me[2] and me[3] == master_id:
                return node.port
    raise AssertionError(f"no replica of {master}")


def _order(i: int) -> NewOrder:
    # A buy, then a sell that fills it: each is answered with one Accepted (and a fill).
    return NewOrder(f"CLIENT0{1 + i % 2}", f"c{i}", "ACORN.LAB", 1 + i % 2, 10000, 1, 0, "gw1", i + 1, i)


@pytest.fixture(params=["resharding", "failover"])
def setup(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, LocalCluster]]:
    replicas = 1 if request.param == "failover" else 0
    with LocalCluster(tmp_path / "cluster", masters=3, replicas=replicas) as local:
        yield request.param, local


def test_the_lean_matcher_follows_its_slot_to_a_new_master(setup: tuple[str, LocalCluster]) -> None:
    how, local = setup
    rc = RedisCluster(startup_nodes=[ClusterNode("127.0.0.1", local.first_port)])
    masters = [n.port for n in local.nodes[:local.masters]]
    total = 600
    settings = load({"REDIS_URL": local.url, "FIXLAB_MATCHER_BLOCK_MS": "50",
                     "FIXLAB_MATCHER_HEALTH_SECONDS": "0.2", "FIXLAB_MATCHER_BATCH": "8",
                     "FIXLAB_MATCHER_SNAPSHOT_EVERY": "50"})
    service = MatcherService(settings)
    assert isinstance(service.consumer, LeanStreamConsumer)
    conn = service.consumer.conn
    assert isinstance(conn, SlotConnection)
    before = _owner_port(masters)
    assert conn.address == f"127.0.0.1:{before}"
    stop = threading.Event()
    errors: list[BaseException] = []

    def run() -> None:
        try:
            service.run(stop)
        except BaseException as exc:  # surfaced below
            log.exception("the matcher stopped")
            errors.append(exc)

    go_on = threading.Event()

    def produce() -> None:
        for i in range(total):
            if i == total // 2 and how == "failover":
                # The failover comes while the matcher waits in a blocking read: its master turned
                # replica ends it with UNBLOCKED (a write there would be answered MOVED).
                go_on.wait(60)
            publish(rc, ORDERS, [_order(i)], 1_000_000)
            time.sleep(0.003)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    producer = threading.Thread(target=produce, daemon=True)
    try:
        producer.start()
        eventually(lambda: service.engine.commands >= total // (4 if how == "resharding" else 2),
                   timeout=30, what="orders applied before the slot moves")
        if how == "resharding":
            after = next(p for p in masters if p != before)
            _migrate_slot(before, after, masters)
        else:
            after = _replica_of(local, before)
            with redis.Redis(port=after) as replica:
                replica.execute_command("CLUSTER", "FAILOVER")  # the graceful, manual one
                eventually(lambda: replica.execute_command("ROLE")[0] == b"master", timeout=20,
                           what="the replica promoted")
            go_on.set()
        producer.join(60)
        assert not producer.is_alive()
        last: Any = rc.xrevrange(ORDERS, count=1)
        last_id = last[0][0]

        def applied() -> bool:
            assert not errors, errors
            done: Any = rc.get(streams.applied_key(ORDERS, streams.MATCHER_GROUP))
            return bool(done == last_id)

        eventually(applied, timeout=60, what="every order applied after the slot moved")
        assert _owner_port([*masters, after]) == after
        assert conn.address == f"127.0.0.1:{after}"
        assert conn.redirects >= 1 or how == "failover"
    finally:
        stop.set()
        thread.join(15)
        rc.close()
    assert not thread.is_alive() and not errors, errors
    rows: Any = RedisCluster(startup_nodes=[ClusterNode("127.0.0.1", after)]).xrange(EVENTS)
    got = [m for _, f in rows for m in decode_batch(f[streams.BATCH_FIELD])]
    accepted = [m.clordid for m in got if isinstance(m, Accepted)]
    assert len(accepted) == total, [m for m in got if not isinstance(m, Accepted)][:3]
    assert accepted == [f"c{i}" for i in range(total)]  # each once, in order
    assert service.engine.resting_orders == 0


def test_the_lean_events_thread_and_intake_follow_a_resharding(tmp_path: Path) -> None:
    # The gateway's side: its intake writes (EVALSHA with the done count) to shard 0's orders stream
    # and its events thread reads shard 0's events stream for it (and its own), both over lean
    # connections, while shard 0's slot moves to another master.
    with LocalCluster(tmp_path / "cluster", masters=3) as local:
        rc = RedisCluster(startup_nodes=[ClusterNode("127.0.0.1", local.first_port)])
        masters = [n.port for n in local.nodes[:local.masters]]
        names = [streams.events_stream("gw1"), EVENTS]
        done_key = streams.shard_intake_done_key("0", "gw1", "r1")
        intake = ClusterIntake(rc, {ORDERS: done_key}, lean=True, timeout_s=1.0)
        consumer = ClusterMultiStreamConsumer(rc, names, streams.GATEWAY_GROUP, "gw1", block_ms=50, lean=True)
        total = 400
        handled: list[str] = []

        def handle(batch: list[Entry]) -> None:
            handled.extend(m.clordid for _, msgs in batch for m in msgs if isinstance(m, Accepted))

        def produce() -> None:
            for i in range(total):
                event = Accepted("S", f"e{i}", "O", "ACORN.LAB", 1, 1, 1, 0, f"E{i}", i)
                publish(rc, EVENTS, [event], 10_000)
                payload = encode_batch([_order(i)])
                while True:  # as the publisher does: the failed destination again (its count checked)
                    try:
                        if not intake.xadd_batches([(ORDERS, payload)], 10_000, ("", i + 1)):
                            break
                    except redis.RedisError:
                        pass
                    time.sleep(0.02)
                time.sleep(0.003)

        stop = threading.Event()
        thread = threading.Thread(target=consumer.run, args=(handle, stop), daemon=True)
        producer = threading.Thread(target=produce, daemon=True)
        thread.start()
        producer.start()
        try:
            eventually(lambda: len(handled) >= total // 4, timeout=30, what="a quarter handled")
            before = _owner_port(masters)
            after = next(p for p in masters if p != before)
            _migrate_slot(before, after, masters)
            producer.join(60)
            assert not producer.is_alive()
            eventually(lambda: len(handled) >= total, timeout=30, what="every event handled")
        finally:
            stop.set()
            thread.join(10)
            intake.close()
        assert not thread.is_alive()
        assert handled == [f"e{i}" for i in range(total)]  # each once, in order
        rows: Any = rc.xrange(ORDERS)
        assert [getattr(m, "clordid", None) for _, f in rows for m in decode_batch(f[streams.BATCH_FIELD])
                ] == [f"c{i}" for i in range(total)]
        assert rc.get(done_key) == str(total).encode()
        assert intake._conns[ORDERS].address == f"127.0.0.1:{after}"
        assert intake._conns[ORDERS].redirects >= 1
        lane = next(x for x in consumer.lanes if EVENTS in [y.stream for y in x.lanes])  # type: ignore[union-attr]
        assert lane.conn.address == f"127.0.0.1:{after}"  # type: ignore[union-attr]
        assert lane.conn.redirects >= 1  # type: ignore[union-attr]
        rc.close()


def test_a_blocking_read_ended_by_a_failover_fails_like_an_outage_and_the_next_goes_to_the_new_master(
        tmp_path: Path) -> None:
    # Its master turned replica ends the read with MOVED or UNBLOCKED (whichever the node sends first):
    # either is a redis.ConnectionError here, never an error reply the consumer loop would raise.
    with LocalCluster(tmp_path / "cluster", masters=3, replicas=1) as local:
        rc = RedisCluster(startup_nodes=[ClusterNode("127.0.0.1", local.first_port)])
        masters = [n.port for n in local.nodes[:local.masters]]
        rc.xgroup_create(ORDERS, "g", id="0", mkstream=True)
        conn = SlotConnection(rc, ORDERS, timeout_s=2.0)
        before = _owner_port(masters)
        read = b"*9\r\n" + b"".join(resp.bulk(a) for a in (b"XREADGROUP", b"GROUP", b"g", b"c", b"BLOCK",
                                                             b"10000", b"STREAMS", ORDERS.encode(), b">"))
        got: list[BaseException | Any] = []

        def blocked() -> None:
            try:
                got.append(conn.roundtrip(read, 1, timeout_s=15))
            except redis.RedisError as exc:
                got.append(exc)

        thread = threading.Thread(target=blocked, daemon=True)
        thread.start()
        with redis.Redis(port=before) as m:
            eventually(lambda: int(m.info("clients")["blocked_clients"]) == 1, what="the read blocked")
        after = _replica_of(local, before)
        with redis.Redis(port=after) as replica:
            replica.execute_command("CLUSTER", "FAILOVER")
        thread.join(15)
        assert len(got) == 1 and isinstance(got[0], redis.ConnectionError), got
        assert conn.redirects == 1
        # The next calls go to the new master. After MOVED at once; after UNBLOCKED (no address) the
        # slot map is asked again, and a node that has not heard of the failover yet may point at the
        # old master once more, which answers MOVED: that call fails like an outage too (a CI run).
        def xlen() -> int | None:
            try:
                return int(conn.call("XLEN", ORDERS))
            except redis.ConnectionError:
                return None
        assert eventually(lambda: xlen() == 0 or None, timeout=10, what="XLEN from the new master")
        assert conn.address == f"127.0.0.1:{after}"
        conn.close()
        rc.close()
