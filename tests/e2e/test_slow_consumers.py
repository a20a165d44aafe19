"""Fault 6 of issue 13: slow consumers. While a bench trades, a lab page stops reading its WebSocket,
a FIX client stops reading its socket (after sending orders), and a market-data subscriber stops
reading its X messages. Everyone else keeps trading; the web drops the page that fell behind (1013)
once its bounded queue is full; the web's and the gateway's resident memory stay within a bound.

The bounds asserted are generous (what a leak would blow through, not a benchmark): the figures
measured are printed, and docs/RELIABILITY.md reports them.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import redis

from benchmarks.chaos.slow import DeafFix, StalledPage
from shared import streams
from tests.e2e.webstack import Client, WebProcess, web_process
from tests.gateway_stack import FixClient, Stack, gateway_stack, matcher_available, order
from tests.helpers import eventually

pytestmark = [
    pytest.mark.xdist_group("faults"),
    pytest.mark.e2e,
    pytest.mark.skipif(not matcher_available(), reason="services.matcher is not in this checkout"),
]

ROOT = Path(__file__).resolve().parent.parent.parent
QUEUE = 300  # the web's per-page queue, small so that a stalled page falls that far behind in the test
BENCH_ORDERS = 20_000
WEB_GROWTH_MIB = 60
GATEWAY_GROWTH_MIB = 120
WEB_STALL_S = 5  # the web's kernel ends a connection whose peer took nothing this long (30 s by default)
STALL_S = 5  # the gateway cuts off a FIX peer that leaves 64 KiB unread this long (30 s by default)


@dataclass
class Site:
    stack: Stack
    web: WebProcess


@pytest.fixture(scope="module")
def site() -> Iterator[Site]:
    env = {"FIXLAB_WS_QUEUE": str(QUEUE), "FIXLAB_WEB_STALL_S": str(WEB_STALL_S),
           "FIXLAB_MARKET_INTERVAL": "0.02", "FIXLAB_PAGES_PER_ADDRESS": "10"}
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


def test_slow_readers_are_bounded_and_hurt_no_one(site: Site, tmp_path: Path) -> None:
    with contextlib.ExitStack() as closing:  # every client closed, also when an assertion fails
        _slow_readers(site, tmp_path, closing)


def _slow_readers(site: Site, tmp_path: Path, closing: contextlib.ExitStack) -> None:
    web_pid, gw_pid = site.web.proc.pid, site.stack.gateway.pid
    good = Client(site.web.ws_url)
    closing.callback(good.close)
    good.wait("hello")
    good.send({"op": "logon"})
    good.wait("state", lambda m: m.get("status") == "logged_on", timeout=20)
    rss0 = {"web": rss_mib(web_pid), "gateway": rss_mib(gw_pid)}
    # The good page keeps reading from now on, while the others stall and the bench trades (market
    # traffic for every page and subscriber).
    stop = threading.Event()

    def read_good() -> None:
        while not stop.is_set():
            try:
                good.got.append(json.loads(good.ws.recv(timeout=0.2)))
            except TimeoutError:
                continue

    reader = threading.Thread(target=read_good, daemon=True)
    reader.start()
    closing.callback(reader.join)
    closing.callback(stop.set)

    stalled = StalledPage(site.web.ws_url)
    closing.callback(stalled.close)
    # Its own traffic too: pings whose pongs it never reads (besides the market it is sent), until the
    # web drops it.
    stalled.flood()
    # A FIX client that sends orders and never reads what comes back (a 4 KiB receive buffer: what its
    # kernel takes for it does not depend on the machine's TCP settings).
    deaf = DeafFix(site.stack.fix_port, "CLIENT05")
    closing.callback(deaf.close)
    deaf.orders(2000)
    # A market-data subscriber that never reads its updates.
    lagger = DeafFix(site.stack.fix_port, "CLIENT06")
    closing.callback(lagger.close)
    lagger.subscribe()

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
    # ... and the web ended the stalled page's connection (the kernel did, FIXLAB_WEB_STALL_S after it
    # last read anything): no socket is left held by a peer that never reads.
    eventually(lambda: not stalled.held_by_web(), 60, what="the web's end of the stalled connection gone")
    good.got.clear()
    good.send({"op": "order", "symbol": "ACORN.LAB", "side": "buy", "price": "90.00", "qty": 1})
    good.wait("wire", lambda m: m.get("source") == "exchange" and m.get("msg_type") == "8", timeout=20)

    # So does a fresh FIX pair, beside the deaf client and the lagging subscriber.
    with FixClient(site.stack.fix_port, "CLIENT07") as a, FixClient(site.stack.fix_port, "CLIENT08") as b:
        a.send("D", order("after-b", 1, 1, "110.00"))
        a.expect("8", lambda m: m.get(11) == "after-b" and m.get(150) == "0")
        b.send("D", order("after-s", 2, 1, "110.00"))
        b.expect("8", lambda m: m.get(11) == "after-s" and m.get(150) == "F")

    # The deaf FIX client was cut off (its backlog no longer grows in QuickFIX's send queue): the
    # gateway counts it, and the client reads what the kernel held for it, then the end of the connection.
    r = redis.Redis.from_url(site.stack.redis_url)
    cut = eventually(lambda: int(r.hget(streams.health_key("gateway", "gwslow"), "stalled_readers_cut") or 0),
                     60, what="the gateway's count of stalled readers cut off")
    r.close()
    assert cut >= 1
    assert deaf.cut(), "the gateway still holds the connection of a client that never reads"
    rss1 = {"web": rss_mib(web_pid), "gateway": rss_mib(gw_pid)}
    print(f"\nslow consumers: rss MiB before {rss0}, after {rss1}; web counters {status['web']}")
    assert site.web.proc.poll() is None and site.stack.gateway.poll() is None
    assert rss1["web"] - rss0["web"] < WEB_GROWTH_MIB, (rss0, rss1)
    assert rss1["gateway"] - rss0["gateway"] < GATEWAY_GROWTH_MIB, (rss0, rss1)
