"""The whole stack on a Redis Cluster with one replica per master, the master of shard a's slot
killed -9 mid-run and its replica promoted (issue 16), with FIXLAB_REDIS_WAIT_REPLICAS=1.

Two stock QuickFIX clients (the installed FIX44.xml, every validation switch on) trade steadily on
both shards. The loss window is forced (a lagging replica would open it): shard a's replica is
stopped and its link cut while orders flow, so its master acknowledges writes its replica never
gets; then the master is killed -9, the replica continued and promoted (CLUSTER FAILOVER TAKEOVER),
and the killed node started again (it rejoins as the new master's replica). The writes of that
window are gone from the cluster, and the exchange must have told nobody about them: every order
sent gets an answer (the intake re-sends what no replica confirmed; the matcher, whose last commit
is gone, rebuilds from what Redis kept), no ExecID comes twice, each match id is on exactly two
fills, every order still open is in its book (a 35=H status request finds it), no session Reject.
What the same window loses with the setting off is shown in tests/integration/test_cluster_failover.py.
"""

from __future__ import annotations

import shutil
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis.cluster import ClusterNode, RedisCluster

from shared import streams
from shared.redis_cluster import LocalCluster
from shared.redis_server import free_port
from tests.e2e.runner_process import Runner, runner
from tests.helpers import eventually
from tests.integration.test_cluster_failover import cut_off, fail_over, owner_and_replica, rejoin
from tests.stock_client import StockSession, stock_sessions

pytestmark = [pytest.mark.xdist_group("faults"), pytest.mark.e2e, pytest.mark.timeout(400)]

if shutil.which("redis-cli") is None or shutil.which("redis-server") is None:
    pytest.skip("redis-server and redis-cli are needed to build a cluster", allow_module_level=True)

SHARDS = "ACORN.LAB:a,BIRCH.LAB:b"
PRICES = {"ACORN.LAB": "99.50", "BIRCH.LAB": "24.50"}


def _now() -> str:
    return time.strftime("%Y%m%d-%H:%M:%S", time.gmtime())


def _order(clordid: str, symbol: str, side: int, qty: int) -> list[tuple[int, object]]:
    return [(11, clordid), (55, symbol), (54, side), (60, _now()), (38, qty), (40, 2),
            (44, PRICES[symbol]), (59, 0)]


class Flow:
    """Steady orders from a buyer and a seller on both instruments, until stopped."""

    def __init__(self, buyer: StockSession, seller: StockSession) -> None:
        self.buyer, self.seller = buyer, seller
        self.sent: list[tuple[StockSession, str, str]] = []  # (session, ClOrdID, symbol)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        n = 0
        while not self.stop.is_set():
            n += 1
            for symbol in PRICES:
                for s, side, qty in ((self.buyer, 1, 2), (self.seller, 2, 1)):
                    clordid = f"{s.comp[-2:]}-{symbol[0]}-{n}"
                    s.send("D", _order(clordid, symbol, side, qty))
                    self.sent.append((s, clordid, symbol))
            self.stop.wait(0.05)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path / "cluster", masters=3, replicas=1, node_timeout_ms=1000) as local:
        yield local


@pytest.fixture
def stack(cluster: LocalCluster, tmp_path: Path) -> Iterator[tuple[Runner, int]]:
    fix_port = free_port()
    env = {"REDIS_URL": cluster.url, "FIXLAB_SHARDS": SHARDS, "FIXLAB_BOTS": "0",
           "FIXLAB_RUN_DIR": str(tmp_path / "run"), "FIXLAB_FIX_PORT": str(fix_port),
           "FIXLAB_WEB_PORT": str(free_port()), "FIXLAB_GATEWAY_ID": "gw1",
           "FIXLAB_REDIS_WAIT_REPLICAS": "1"}
    with runner(env) as run:
        run.wait_line(r"gateway gw1 ready", timeout=90)
        try:
            yield run, fix_port
        finally:
            (tmp_path / "runner.log").write_text("\n".join(run.lines))


def reports(s: StockSession) -> list[dict[int, str]]:
    with s.client.lock:
        return [m for m in s.client.received if m.get(35) == "8"]


def unanswered(sent: list[tuple[StockSession, str, str]]) -> list[str]:
    """The ClOrdIDs sent that got neither a New nor a reject yet."""
    answered = {(s.comp, m.get(11)) for s in {x[0] for x in sent} for m in reports(s)
                if m.get(150) in ("0", "8")}
    return [c for s, c, _ in sent if (s.comp, c) not in answered]


def test_a_master_failover_loses_nothing_anyone_was_told(cluster: LocalCluster,
                                                         stack: tuple[Runner, int], tmp_path: Path) -> None:
    run, fix_port = stack
    rc = RedisCluster(startup_nodes=[ClusterNode("127.0.0.1", n.port) for n in cluster.nodes])
    master, replica = owner_and_replica(cluster, streams.orders_stream("a"))
    rc.close()
    (tmp_path / "clients").mkdir()
    with stock_sessions(tmp_path / "clients", fix_port, ["CLIENT09", "CLIENT10"]) as (buyer, seller):
        flow = Flow(buyer, seller)
        flow.thread.start()
        try:
            eventually(lambda: len(flow.sent) >= 40 and not unanswered(flow.sent[:40]),
                       timeout=60, what="the first orders answered")
            cut_off(cluster, master, replica)
            sent_before_cut = len(flow.sent)
            eventually(lambda: len(flow.sent) >= sent_before_cut + 40, timeout=30,
                       what="orders sent while shard a's replica is cut off")
            fail_over(cluster, master, replica)
            rejoin(cluster, master)
            sent_after_failover = len(flow.sent)
            eventually(lambda: len(flow.sent) >= sent_after_failover + 40, timeout=30,
                       what="orders sent after the failover")
        finally:
            flow.stop.set()
            flow.thread.join(5)
        # Every order sent gets its answer: a New (then perhaps fills) or a reject.
        try:
            eventually(lambda: not unanswered(flow.sent), timeout=120, interval=0.5,
                       what="every order answered after the failover")
        except AssertionError:
            left = unanswered(flow.sent)
            raise AssertionError(f"{len(left)} of {len(flow.sent)} unanswered: {left[:20]}; "
                                 f"runner log in {tmp_path / 'runner.log'}") from None
        ers = reports(buyer) + reports(seller)
        exec_ids = Counter(m[17] for m in ers)
        assert [e for e, n in exec_ids.items() if n > 1] == [], "an ExecID came twice"
        matches = Counter(m[527] for m in ers if m.get(150) == "F")
        assert matches and all(n == 2 for n in matches.values()), matches
        # Every order a client was told is open (its last report says New or partly filled) is
        # in its book: a status request finds it open, not unknown.
        for s in (buyer, seller):
            last: dict[str, dict[int, str]] = {}
            for m in reports(s):
                if m.get(150) != "I":
                    last[m[11]] = m
            open_orders = [(c, m) for c, m in last.items() if m.get(39) in ("0", "1")]
            assert open_orders or s is seller
            for clordid, m in open_orders:
                s.send("H", [(11, clordid), (55, m[55]), (54, m[54])])
            for clordid, m in open_orders:
                status = s.client.wait("8", lambda x, c=clordid: x.get(11) == c and x.get(150) == "I",
                                       timeout_s=30)
                assert status.get(39) == m.get(39) and status.get(14) == m.get(14), (m, status)
        assert buyer.client.session_rejects() == [] and seller.client.session_rejects() == []
        assert buyer.client.errors == [] and seller.client.errors == []
    # When the matcher of shard a committed in the window (it had read orders the master took before
    # the intake found the replica gone), its last commits went with the old master: it rebuilt from
    # what the promoted replica kept (WritesLost -> RecoveryError, restarted by the runner) and went
    # on. Whether it committed there is a matter of timing (in one CI run the intake's replica probe
    # saw the cut first and nothing reached the matcher), so the test asks for the consequence, not
    # the event: a matcher restarts exactly when Redis lost its writes, and for no other reason.
    lost = run.find(r"Redis lost acknowledged writes: restart to rebuild")
    restarted = run.find(r"restarted matcher")
    assert bool(lost) == bool(restarted), run.tail(120)
    assert not run.find(r"cannot recover: (?!.*Redis lost acknowledged writes)"), run.tail(120)
