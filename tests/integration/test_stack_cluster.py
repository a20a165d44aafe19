"""The whole stack on a real Redis Cluster (issue 16): three masters started here, then the runner
(``python -m services``, what ``make run`` starts) with REDIS_URL naming the cluster's nodes, two
matcher shards (ACORN.LAB on a, BIRCH.LAB on b), the gateway and the web (bots off: their ladder
would trade with the orders below).

A stock QuickFIX client (the installed FIX44.xml, every validation switch on) trades on both
instruments and gets its New and Trade ExecutionReports, and a refusal the gateway's intake decides
(in the gateway's own slot), with no session Reject; its Logout cancels what it left resting on both
shards. A page's WebSocket sees the trades and each book's depth; its lab session (the web's lab
start, the gateway's lab manager, the tap) trades too; /api/status lists every service and the
streams of every node; ``fixlab list`` lists the streams every master holds.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from redis.cluster import ClusterNode, RedisCluster
from redis.crc import key_slot

from shared import streams
from shared.redis_cluster import LocalCluster
from shared.redis_server import free_port
from shared.schema import Cancelled, decode_batch
from tests.e2e.webstack import Client, bots_process
from tests.gateway_stack import ROOT, stop_process
from tests.helpers import eventually
from tests.integration.test_gateway_marketdata import send_v, v
from tests.stock_client import stock_sessions

pytestmark = [pytest.mark.xdist_group("faults"), pytest.mark.integration, pytest.mark.timeout(300)]

if shutil.which("redis-cli") is None or shutil.which("redis-server") is None:
    pytest.skip("redis-server and redis-cli are needed to build a cluster", allow_module_level=True)

SHARDS = "ACORN.LAB:a,BIRCH.LAB:b"
GATEWAY = "gw1"


@dataclass
class Runner:
    proc: subprocess.Popen[bytes]
    fix_port: int
    web_port: int
    lines: list[str] = field(default_factory=list)

    @property
    def web(self) -> str:
        return f"http://127.0.0.1:{self.web_port}"

    def log(self) -> str:
        return "\n".join(self.lines[-200:])


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("cluster"), masters=3) as local:
        yield local


@pytest.fixture(scope="module")
def runner(cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runner]:
    """``python -m services`` on the cluster: no redis-server of its own (REDIS_URL is set)."""
    run_dir = tmp_path_factory.mktemp("run")
    fix_port, web_port = free_port(), free_port()
    env = {**os.environ, "REDIS_URL": cluster.url, "FIXLAB_SHARDS": SHARDS, "FIXLAB_BOTS": "0",
           "FIXLAB_RUN_DIR": str(run_dir), "FIXLAB_FIX_PORT": str(fix_port),
           "FIXLAB_WEB_PORT": str(web_port), "FIXLAB_GATEWAY_ID": GATEWAY, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "services"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    run = Runner(proc, fix_port, web_port)

    def pump() -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            run.lines.append(raw.decode("utf-8", "replace").rstrip("\n"))

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        eventually(lambda: any(f"gateway {GATEWAY} ready" in x for x in run.lines) or proc.poll() is not None,
                   timeout=90, what="the gateway ready")
        eventually(lambda: _get(f"{run.web}/api/health").get("ok") or proc.poll() is not None, timeout=60,
                   what="the web answering")
        assert proc.poll() is None, run.log()
        assert not any("private redis-server" in x for x in run.lines), "the runner started its own Redis"
        yield run
    except BaseException:
        sys.stderr.write(f"----- runner -----\n{run.log()}\n")
        raise
    finally:
        stop_process(proc, 60)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # anything of the runner's group left behind
        reader.join(5)
        if proc.stdout is not None:
            proc.stdout.close()


@pytest.fixture(scope="module")
def rc(cluster: LocalCluster) -> Iterator[RedisCluster]:
    client = RedisCluster(startup_nodes=[ClusterNode("127.0.0.1", cluster.first_port)])
    yield client
    client.close()


def _get(url: str) -> Any:
    try:
        reply = httpx.get(url, timeout=5)
    except httpx.HTTPError:
        return {}
    return reply.json() if reply.status_code == 200 else {}


def _now() -> str:
    return time.strftime("%Y%m%d-%H:%M:%S", time.gmtime())


def _order(clordid: str, symbol: str, side: int, qty: int, price: str) -> list[tuple[int, object]]:
    return [(11, clordid), (55, symbol), (54, side), (60, _now()), (38, qty), (40, 2), (44, price), (59, 0)]


def _cancelled(rc: RedisCluster, shard: str, session: str) -> list[Cancelled]:
    rows: Any = rc.xrange(streams.shard_events_stream(shard, GATEWAY))
    return [m for _id, f in rows for m in decode_batch(f[streams.BATCH_FIELD])
            if isinstance(m, Cancelled) and m.session == session]


def _depth(page: Client, symbol: str, side: str, want: list[list[object]]) -> dict[str, Any]:
    return page.wait("depth", lambda m: m["symbol"] == symbol and m[side] == want, timeout=20)


def test_the_stack_trades_on_a_redis_cluster(runner: Runner, rc: RedisCluster, cluster: LocalCluster,
                                             tmp_path: Path) -> None:
    # The streams of the two shards and of the gateway are not all on one node: nothing here can
    # work by sharing one Redis by chance.
    slots = {name: key_slot(name.encode()) for name in
             (streams.orders_stream("a"), streams.orders_stream("b"), streams.events_stream(GATEWAY))}
    owners = {name: rc.get_node_from_key(name).name for name in slots}
    assert len(set(owners.values())) >= 2, owners

    page = Client(f"ws://127.0.0.1:{runner.web_port}/ws")
    try:
        page.wait("hello")
        with stock_sessions(tmp_path, runner.fix_port, ["CLIENT09", "CLIENT10"]) as (sa, sb):
            a, b = sa.client, sb.client
            # A buys on both shards (New), B sells into both (a Trade for each side on each shard).
            sa.send("D", _order("a-acorn", "ACORN.LAB", 1, 10, "99.50"))
            sa.send("D", _order("a-birch", "BIRCH.LAB", 1, 10, "24.50"))
            for clordid in ("a-acorn", "a-birch"):
                a.wait("8", lambda m, c=clordid: m.get(11) == c and m.get(150) == "0", timeout_s=20)
            sb.send("D", _order("b-acorn", "ACORN.LAB", 2, 4, "99.50"))
            sb.send("D", _order("b-birch", "BIRCH.LAB", 2, 3, "24.50"))
            for client, clordid, left in ((a, "a-acorn", "6"), (a, "a-birch", "7"),
                                          (b, "b-acorn", "0"), (b, "b-birch", "0")):
                fill = client.wait("8", lambda m, c=clordid: m.get(11) == c and m.get(150) == "F",
                                   timeout_s=20)
                assert fill[151] == left, fill
            # Refused by the gateway's intake (off the tick grid): answered from the gateway's own slot.
            sa.send("D", _order("a-bad", "ACORN.LAB", 1, 1, "99.505"))
            assert "tick" in a.wait("8", lambda m: m.get(11) == "a-bad" and m.get(150) == "8")[58].lower()

            # The page sees both trades and both books (the web follows each shard's market stream).
            for symbol, price, qty in (("ACORN.LAB", "99.50", 4), ("BIRCH.LAB", "24.50", 3)):
                page.wait("trade", lambda m, t=(symbol, price, qty): (m["symbol"], m["price"], m["qty"]) == t)
            _depth(page, "ACORN.LAB", "bids", [["99.50", 6, 1]])
            _depth(page, "BIRCH.LAB", "bids", [["24.50", 7, 1]])

            # FIX market data (the gateway's market-data thread: an XREAD per shard's market stream,
            # an ImageRequest on each shard's orders stream): a snapshot of each book, then updates.
            send_v(sb, v("md1", kind=1, types="01"))
            for symbol, qty in (("ACORN.LAB", "6"), ("BIRCH.LAB", "7")):
                b.wait("W", lambda m, s=symbol, q=qty: (m.get(262), m.get(55), m.get(269), m.get(271)) ==
                       ("md1", s, "0", q), timeout_s=20)

            # A lab session through the page: the web's LabStart, the gateway's lab manager and tap,
            # its order on the bus like any other; it sells into A's BIRCH bid.
            page.send({"op": "logon"})
            page.wait("state", lambda m: m["status"] == "logged_on", timeout=30)
            page.send({"op": "order", "symbol": "BIRCH.LAB", "side": "sell", "price": "24.50", "qty": 2})
            page.wait("fill", timeout=20)
            a.wait("8", lambda m: (m.get(11), m.get(150), m.get(151)) == ("a-birch", "F", "5"), timeout_s=20)
            _depth(page, "BIRCH.LAB", "bids", [["24.50", 5, 1]])
            b.wait("X", lambda m: m.get(262) == "md1" and m.get(271) == "5", timeout_s=20)

            # /api/status: every service's health, the streams of every node.
            def status_complete() -> dict[str, Any]:
                st = _get(f"{runner.web}/api/status")
                services = {i["service"] for i in st.get("instances", [])}
                shards = {i["instance"] for i in st.get("instances", []) if i["service"] == "matcher"}
                names = {s["stream"] for s in st.get("streams", [])}
                ok = ({"matcher", "gateway", "web"} <= services and {"a", "b"} <= shards
                      and set(slots) <= names and st.get("fix_sessions", 0) >= 2)
                return st if ok else {}
            eventually(status_complete, timeout=30, what="/api/status with every service and stream")

            # No session Reject from the stock engines, whatever they received.
            assert a.session_rejects() == [] and b.session_rejects() == []
            assert a.errors == [] and b.errors == []
            # A logs out (the stock initiator stops): what it left resting on both shards is cancelled.
        eventually(lambda: _cancelled(rc, "a", "CLIENT09") and _cancelled(rc, "b", "CLIENT09"), timeout=30,
                   what="CLIENT09's resting orders cancelled on both shards")
        assert {c.orig_clordid or c.clordid for c in _cancelled(rc, "a", "CLIENT09")} == {"a-acorn"}
        assert {c.orig_clordid or c.clordid for c in _cancelled(rc, "b", "CLIENT09")} == {"a-birch"}
        _depth(page, "ACORN.LAB", "bids", [])
        _depth(page, "BIRCH.LAB", "bids", [])
    finally:
        page.close()

    # fixlab list on the cluster: every stream of every master, as each node's own SCAN finds them.
    listed = subprocess.run([sys.executable, "-m", "shared.streams", "list", "--json"], cwd=ROOT,
                            env={**os.environ, "REDIS_URL": cluster.url}, capture_output=True, text=True,
                            timeout=60, check=True)
    names = {row["stream"] for row in json.loads(listed.stdout)}
    on_nodes: dict[int, set[str]] = {}
    for node in cluster.nodes:
        plain = redis.Redis(host="127.0.0.1", port=node.port)
        try:
            on_nodes[node.port] = {k.decode() for k in plain.scan_iter(count=1000, _type="stream")}
        finally:
            plain.close()
    assert names == set().union(*on_nodes.values())
    assert sum(1 for held in on_nodes.values() if held) >= 2, on_nodes
    assert set(slots) | {streams.shard_market_stream("a"), streams.shard_market_stream("b")} <= names
    # No service logged an error on the way (a refused cross-slot command would).
    assert [x for x in runner.lines if "level=error" in x or "Traceback" in x] == []


def test_the_bots_quote_on_a_redis_cluster(runner: Runner, cluster: LocalCluster) -> None:
    """The liquidity bots (FIX sessions, and a health reporter on the cluster): their ladders reach
    both books, and /api/status counts them."""
    env = {"FIXLAB_SHARDS": SHARDS, "FIXLAB_BOTS": "2"}
    with bots_process(cluster.url, runner.fix_port, env=env):
        page = Client(f"ws://127.0.0.1:{runner.web_port}/ws")
        try:
            for symbol in ("ACORN.LAB", "BIRCH.LAB"):
                page.wait("depth", lambda m, s=symbol: m["symbol"] == s and bool(m["bids"] and m["asks"]),
                          timeout=30)
        finally:
            page.close()
        eventually(lambda: any(i["service"] == "bots" for i in _get(f"{runner.web}/api/status")
                               .get("instances", [])), timeout=30, what="the bots' health in /api/status")
    assert [x for x in runner.lines if "level=error" in x or "Traceback" in x] == []
