"""Fault 6 of issue 13: slow consumers. While a bench trades, a lab page stops reading its WebSocket,
a FIX client stops reading its socket (after sending orders), and a market-data subscriber stops
reading its X messages. Everyone else keeps trading; the web drops the page that fell behind (1013)
once its bounded queue is full; the web's and the gateway's resident memory stay within a bound.

The bounds asserted are generous (what a leak would blow through, not a benchmark): the figures
measured are printed, and docs/RELIABILITY.md reports them.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import redis
from websockets.sync.client import ClientConnection, connect

from shared import streams
from tests.e2e.webstack import Client, WebProcess, web_process
from tests.gateway_stack import FixClient, Stack, gateway_stack, matcher_available, order
from tests.helpers import eventually

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not matcher_available(), reason="services.matcher is not in this checkout"),
]

ROOT = Path(__file__).resolve().parent.parent.parent
QUEUE = 300  # the web's per-page queue, small so that a stalled page falls that far behind in the test
BENCH_ORDERS = 20_000
WEB_GROWTH_MIB = 60
GATEWAY_GROWTH_MIB = 120
STALL_S = 5  # the gateway cuts off a FIX peer that leaves 64 KiB unread this long (30 s by default)


@dataclass
class Site:
    stack: Stack
    web: WebProcess


@pytest.fixture(scope="module")
def site() -> Iterator[Site]:
    env = {"FIXLAB_WS_QUEUE": str(QUEUE), "FIXLAB_MARKET_INTERVAL": "0.02", "FIXLAB_PAGES_PER_ADDRESS": "10"}
    gw_env = {"FIXLAB_FIX_STALL_S": str(STALL_S)}
    with gateway_stack(None, labs=True, gateway_id="gwslow", env=gw_env) as stack, \
            web_process(stack.redis_url, env=env) as web:
        yield Site(stack, web)


def rss_mib(pid: int) -> float:
    """VmRSS of ``pid`` and its children (the gateway's publisher), in MiB."""
    pids = [pid]
    for task in Path(f"/proc/{pid}/task").iterdir():
        pids += [int(c) for c in (task / "children").read_text().split()]
    total = 0
    for p in pids:
        for line in Path(f"/proc/{p}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1])
    return total / 1024


def stalled_page(url: str) -> tuple[ClientConnection, socket.socket]:
    """A page that logs on and then never reads: a tiny receive buffer, one message queued at most."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    host, port = url.split("//")[1].split("/")[0].split(":")
    sock.connect((host, int(port)))
    ws = connect(url, sock=sock, max_queue=1, open_timeout=10, ping_interval=None, legacy=True)
    ws.send(json.dumps({"op": "logon"}))
    return ws, sock


def test_slow_readers_are_bounded_and_hurt_no_one(site: Site, tmp_path: Path) -> None:
    web_pid, gw_pid = site.web.proc.pid, site.stack.gateway.pid
    good = Client(site.web.ws_url)
    good.wait("hello")
    good.send({"op": "logon"})
    good.wait("state", lambda m: m.get("status") == "logged_on", timeout=20)
    rss0 = {"web": rss_mib(web_pid), "gateway": rss_mib(gw_pid)}

    stalled, _sock = stalled_page(site.web.ws_url)
    # Its own traffic too: 20,000 pings whose pongs it never reads (besides the market it is sent).
    for i in range(20_000):
        stalled.send(json.dumps({"op": "ping", "id": f"{i:064d}"}))
    # A FIX client that sends orders and never reads what comes back.
    deaf = FixClient(site.stack.fix_port, "CLIENT05")
    for i in range(2000):
        deaf.send("D", order(f"deaf-{i}", 1 + i % 2, 1, "99.00" if i % 2 else "101.00"))
    # A market-data subscriber that never reads its updates.
    lagger = FixClient(site.stack.fix_port, "CLIENT06")
    lagger.send("V", [(262, "md1"), (263, 1), (264, 0), (265, 1), (267, 2), (269, 0), (269, 1), (146, 1),
                      (55, "ACORN.LAB")])

    # The good page keeps reading while the bench trades (market traffic for every page and subscriber).
    stop = threading.Event()

    def read_good() -> None:
        while not stop.is_set():
            try:
                good.got.append(json.loads(good.ws.recv(timeout=0.2)))
            except TimeoutError:
                continue

    reader = threading.Thread(target=read_good, daemon=True)
    reader.start()
    out = tmp_path / "bench.json"
    bench = subprocess.run(
        [sys.executable, "-m", "services.bench", "--addr", f"127.0.0.1:{site.stack.fix_port}", "--sessions",
         "4", "--window", "16", "--orders", str(BENCH_ORDERS), "--warmup", "0", "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    stop.set()
    reader.join()
    assert bench.returncode == 0, bench.stderr[-2000:]
    result = json.loads(out.read_text())
    assert (result["acknowledged"], result["lost"]) == (BENCH_ORDERS, 0)

    # The stalled page fell behind and was dropped; the good page still trades.
    status = eventually(lambda: (s := httpx.get(f"{site.web.url}/api/status", timeout=5).json())
                        and s["web"].get("pages_dropped", 0) >= 1 and s, 30, what="the stalled page dropped")
    good.got.clear()
    good.send({"op": "order", "symbol": "ACORN.LAB", "side": "buy", "price": "90.00", "qty": 1})
    good.wait("wire", lambda m: m.get("source") == "exchange" and m.get("msg_type") == "8", timeout=20)

    # So does a fresh FIX pair, beside the deaf client and the lagging subscriber.
    with FixClient(site.stack.fix_port, "CLIENT07") as a, FixClient(site.stack.fix_port, "CLIENT08") as b:
        a.send("D", order("after-b", 1, 1, "110.00"))
        a.expect("8", lambda m: m.get(11) == "after-b" and m.get(150) == "0")
        b.send("D", order("after-s", 2, 1, "110.00"))
        b.expect("8", lambda m: m.get(11) == "after-s" and m.get(150) == "F")

    # The deaf FIX client was cut off (its backlog no longer grows in QuickFIX's send queue): what
    # the kernel held for it, then the end of the connection.
    assert deaf.closed(timeout_s=60), "the gateway still holds the connection of a client that never reads"
    r = redis.Redis.from_url(site.stack.redis_url)
    cut = eventually(lambda: int(r.hget(streams.health_key("gateway", "gwslow"), "stalled_readers_cut") or 0),
                     10, what="the gateway's count of stalled readers cut off")
    r.close()
    assert cut >= 1
    rss1 = {"web": rss_mib(web_pid), "gateway": rss_mib(gw_pid)}
    print(f"\nslow consumers: rss MiB before {rss0}, after {rss1}; web counters {status['web']}")
    assert site.web.proc.poll() is None and site.stack.gateway.poll() is None
    assert rss1["web"] - rss0["web"] < WEB_GROWTH_MIB, (rss0, rss1)
    assert rss1["gateway"] - rss0["gateway"] < GATEWAY_GROWTH_MIB, (rss0, rss1)
    deaf.close()
    lagger.close()
    good.close()
