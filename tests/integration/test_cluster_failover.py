"""A Redis Cluster master killed -9 with its replica promoted (issue 16): what asynchronous
replication loses, and that with FIXLAB_REDIS_WAIT_REPLICAS nothing lost was told to anyone.

Real clusters of three masters with one replica each. The loss window is forced, as a lagging
replica would open it: the replica is stopped (SIGSTOP) and its link cut (CLIENT KILL TYPE replica on
the master: a stopped replica alone still gets the bytes, in its socket buffer), writes go to the
master, the master is killed -9, the replica continued (SIGCONT) and promoted (CLUSTER FAILOVER
TAKEOVER: after being stopped it would not win an election in time), and the killed master started
again (it comes back as the new master's replica, which the setting waits for).
Each scenario runs with the setting on (1) and off (0): off,
the write the master acknowledged is gone from the promoted replica after it was told (the events
thread handed it to its handler; the intake reported it done), which is what the setting is for.
"""

from __future__ import annotations

import os
import shutil
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from redis.cluster import ClusterNode as RNode
from redis.cluster import RedisCluster
from redis.crc import key_slot

from services.gateway.slots import ClusterIntake
from shared import streams
from shared.bus import Entry, StreamConsumer
from shared.redis_cluster import LocalCluster
from shared.replication import NodePin
from shared.schema import Refused, decode_batch, encode_batch
from tests.helpers import eventually

pytestmark = [pytest.mark.xdist_group("faults"), pytest.mark.integration, pytest.mark.timeout(120)]

if shutil.which("redis-cli") is None or shutil.which("redis-server") is None:
    pytest.skip("redis-server and redis-cli are needed to build a cluster", allow_module_level=True)

STREAM = "{fo}:events"
DONE = "{fo}:done"
GROUP = "gateways"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path, masters=3, replicas=1, node_timeout_ms=1000) as local:
        yield local


@pytest.fixture
def rc(cluster: LocalCluster) -> Iterator[RedisCluster]:
    client = RedisCluster(startup_nodes=[RNode("127.0.0.1", n.port) for n in cluster.nodes],
                          socket_timeout=2, socket_connect_timeout=2)
    yield client
    client.close()


def _plain(port: int) -> redis.Redis:
    return redis.Redis(host="127.0.0.1", port=port, socket_timeout=2, socket_connect_timeout=2)


def owner_and_replica(cluster: LocalCluster, key: str) -> tuple[int, int]:
    """The port of the master serving ``key``'s slot, and of its replica (CLUSTER NODES)."""
    slot = key_slot(key.encode())
    alive = next(n for n in cluster.nodes if n.proc is not None)
    with _plain(alive.port) as c:
        rows = [line.split() for line in c.execute_command("CLUSTER", "NODES").decode().splitlines()]
    master_id, master_port = "", 0
    for row in rows:
        for part in row[8:]:
            lo, _, hi = part.partition("-")
            if "master" in row[2] and lo.isdigit() and int(lo) <= slot <= int(hi or lo):
                master_id, master_port = row[0], int(row[1].split("@")[0].rsplit(":", 1)[1])
    replica = next(int(row[1].split("@")[0].rsplit(":", 1)[1]) for row in rows if row[3] == master_id)
    return master_port, replica


def signal_node(cluster: LocalCluster, port: int, sig: signal.Signals) -> None:
    node = next(n for n in cluster.nodes if n.port == port)
    assert node.proc is not None
    os.kill(node.proc.pid, sig)


def cut_off(cluster: LocalCluster, master: int, replica: int) -> None:
    """Stop ``replica`` and drop its link: ``master`` acknowledges writes it will never send."""
    signal_node(cluster, replica, signal.SIGSTOP)
    with _plain(master) as m:
        m.execute_command("CLIENT", "KILL", "TYPE", "replica")


def fail_over(cluster: LocalCluster, master: int, replica: int) -> None:
    """Kill -9 ``master``, continue its stopped ``replica`` and have it take the slots over."""
    cluster.kill(master)
    signal_node(cluster, replica, signal.SIGCONT)
    with _plain(replica) as c:
        c.execute_command("CLUSTER", "FAILOVER", "TAKEOVER")
        eventually(lambda: c.execute_command("ROLE")[0] == b"master", timeout=20, what="the replica promoted")


def rejoin(cluster: LocalCluster, old_master: int) -> None:
    """Start the killed master again: it joins as its successor's replica and syncs."""
    cluster.restart(old_master)
    with _plain(old_master) as c:
        eventually(lambda: c.info("replication").get("master_link_status") == "up", timeout=30,
                   interval=0.1, what="the old master back as a replica in sync")


def sessions_in(node: redis.Redis) -> list[str]:
    """The (test) sessions of every message the node's copy of the stream holds."""
    rows: Any = node.xrange(STREAM)
    return [m.session for _id, f in rows for m in decode_batch(f[streams.BATCH_FIELD])]  # type: ignore[attr-defined]


def message(n: int) -> Refused:
    return Refused(session=f"S{n}", body=f"35=8|{n}", ts=n)


def test_wait_after_a_read_covers_the_writes_before_it(cluster: LocalCluster, rc: RedisCluster) -> None:
    """The claim the events thread rests on: an XREADGROUP that delivers an entry is replicated
    after the write that added it (by another client), so WAIT on the reader's connection waits
    for that write too: it times out while the replica is stopped and succeeds once it runs."""
    rc.xgroup_create(STREAM, GROUP, id="0", mkstream=True)
    master, replica = owner_and_replica(cluster, STREAM)
    pin = NodePin(rc, STREAM, 1)
    assert pin.client().connection_pool.connection_kwargs["port"] == master
    signal_node(cluster, replica, signal.SIGSTOP)
    try:
        rc.xadd(STREAM, {streams.BATCH_FIELD: encode_batch([message(1)])})  # another connection
        rows: Any = pin.client().xreadgroup(GROUP, "gw", {STREAM: ">"})
        assert len(rows[0][1]) == 1
        started = time.monotonic()
        assert int(pin.client().execute_command("WAIT", 1, 300)) == 0
        assert time.monotonic() - started >= 0.25
        assert not pin.confirmed(200)
    finally:
        signal_node(cluster, replica, signal.SIGCONT)
    eventually(lambda: pin.confirmed(200), timeout=10, what="the replica confirming after SIGCONT")


@pytest.mark.parametrize("wait_replicas", [1, 0])
def test_events_lost_by_a_failover_were_told_only_without_wait(cluster: LocalCluster, rc: RedisCluster,
                                                               wait_replicas: int) -> None:
    """A matcher's events (here any entry written by another client) on a master whose replica lags:
    with the setting, the consumer's handler (the gateway's: it sends ExecutionReports) never sees
    what the failover then loses, and it goes on reading from the promoted replica."""
    told: list[str] = []

    def handle(batch: list[Entry]) -> None:
        told.extend(m.session for _id, msgs in batch for m in msgs)  # type: ignore[attr-defined]

    consumer = StreamConsumer(rc, STREAM, GROUP, "gw", block_ms=100, wait_replicas=wait_replicas)
    stop = threading.Event()
    thread = threading.Thread(target=consumer.run, args=(handle, stop), daemon=True)
    thread.start()
    try:
        rc.xadd(STREAM, {streams.BATCH_FIELD: encode_batch([message(1)])})
        eventually(lambda: told == ["S1"], what="the first event handled")
        master, replica = owner_and_replica(cluster, STREAM)
        # Replication is asynchronous: the cut must come after the replica holds S1 (in one CI run it
        # came first, and the promoted replica held nothing at all).
        with _plain(replica) as r:
            r.execute_command("READONLY")
            eventually(lambda: sessions_in(r) == ["S1"], what="the first event on the replica")
        cut_off(cluster, master, replica)
        rc.xadd(STREAM, {streams.BATCH_FIELD: encode_batch([message(2)])})  # acknowledged by the master
        with _plain(master) as m:
            eventually(lambda: m.xpending(STREAM, GROUP)["pending"] == 1 or "S2" in told,
                       what="the second event read")
        if wait_replicas:
            time.sleep(1.2)  # two WAIT time-outs and more: long enough for a handler call to show
            assert told == ["S1"], "an event no replica held was handed to the handler"
        else:
            eventually(lambda: "S2" in told, what="the second event handled")
        fail_over(cluster, master, replica)
        with _plain(replica) as promoted:
            kept = sessions_in(promoted)
        assert kept == ["S1"], "the failover lost the write the master acknowledged"
        lost_but_told = sorted(set(told) - set(kept))
        assert lost_but_told == ([] if wait_replicas else ["S2"])
        rejoin(cluster, master)
        # The flow resumes on the promoted replica (the consumer follows the slot to it).
        eventually(lambda: rc.xadd(STREAM, {streams.BATCH_FIELD: encode_batch([message(3)])}), timeout=20,
                   interval=0.2, what="a write after the failover")
        eventually(lambda: "S3" in told, timeout=30, what="the event after the failover handled")
        assert "S2" not in told or not wait_replicas
    finally:
        stop.set()
        thread.join(10)


@pytest.mark.parametrize("wait_replicas", [1, 0])
def test_an_intake_write_is_done_only_once_a_replica_holds_it(cluster: LocalCluster, rc: RedisCluster,
                                                              wait_replicas: int) -> None:
    """The intake's write with its done count: with the setting, a write the replica does not hold
    stays unsure (the acceptor keeps the records), and after the failover the count on the promoted
    replica says it is missing, so it is sent again: written once, kept. Without it, the write was
    reported done and the failover lost it."""
    intake = ClusterIntake(rc, {STREAM: DONE}, wait_replicas=wait_replicas)
    payload = encode_batch([message(7)])

    def publish(payload: bytes, done: int) -> bool:
        try:
            return intake.xadd_batches([(STREAM, payload)], 1000, ("", done)) == []
        except redis.RedisError:  # not confirmed yet (a busy machine), or the slot is moving
            return False

    # The publisher retries until its write is confirmed (a WAIT may time out on a busy machine).
    eventually(lambda: publish(encode_batch([message(6)]), 1), timeout=30, what="the first write")
    master, replica = owner_and_replica(cluster, STREAM)
    with _plain(master) as m:
        m.execute_command("WAIT", 1, 2000)  # the first write is on the replica
    cut_off(cluster, master, replica)
    done_before_failover: bool
    try:
        intake.xadd_batches([(STREAM, payload)], 1000, ("", 2))
        done_before_failover = True
    except redis.TimeoutError:
        done_before_failover = False
    assert done_before_failover == (not wait_replicas)
    fail_over(cluster, master, replica)
    rejoin(cluster, master)
    if wait_replicas:
        # The publisher's retry (the acceptor kept the records): the count on the promoted replica.
        eventually(lambda: publish(payload, 2), timeout=30, interval=0.2,
                   what="the unsure write done after the failover")
    with _plain(replica) as promoted:
        sessions = sessions_in(promoted)
        count = int(promoted.get(DONE) or 0)
    if wait_replicas:
        assert (sessions, count) == (["S6", "S7"], 2)
    else:
        assert (sessions, count) == (["S6"], 1), "without WAIT the acknowledged write is lost"
