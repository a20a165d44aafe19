"""Issue 31's orders from strict stock clients of FIX 4.4, 4.2 and 5.0 SP2 (the dictionaries the
quickfix package installs, every validation switch on): market (40=1), stop (40=3) and stop-limit
(40=4) orders with StopPx (99), At the Opening (59=2). Each gets its ExecutionReports with 40/99
echoed, a stop without StopPx a rejected ExecutionReport saying so (never a session Reject), and no
client ever sends a session Reject for what the exchange says."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.gateway_stack import Stack, gateway_stack, matcher_available
from tests.stock_client import StockSession, stock_sessions

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not matcher_available(), reason="services.matcher is not in this checkout"),
]


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    with gateway_stack(None) as s:
        yield s


def order(s: StockSession, clordid: str, side: int, terms: list[tuple[int, object]],
          tif: int = 0, qty: int = 3) -> None:
    now = time.strftime("%Y%m%d-%H:%M:%S", time.gmtime())
    handl = [(21, 1)] if s.begin == "FIX.4.2" else []
    s.send("D", [(11, clordid), *handl, (55, "ACORN.LAB"), (54, side), (60, now), (38, qty), *terms,
                 (59, tif)])


def report(s: StockSession, clordid: str) -> dict[int, str]:
    return s.client.wait("8", lambda m: m.get(11) == clordid)


@pytest.mark.parametrize(("comp", "fix_version"), [("CLIENT15", "4.4"), ("CLIENT42-08", "4.2"),
                                                   ("CLIENT50-08", "5.0SP2")])
def test_market_stop_and_stop_limit_orders_in_each_version(stack: Stack, tmp_path: Path, comp: str,
                                                           fix_version: str) -> None:
    with stock_sessions(tmp_path, stack.fix_port, [comp], fix_version=fix_version) as (s,):
        order(s, "nostop", 2, [(40, 3)])
        rej = report(s, "nostop")
        assert (rej[150], rej[39], rej[40]) == ("8", "8", "3") and "needs a StopPx (99)" in rej[58]
        order(s, "stop", 2, [(40, 3), (99, "98.50")])
        stop = report(s, "stop")
        assert (stop[40], stop[99]) == ("3", "98.50") and 44 not in stop
        order(s, "stoplimit", 1, [(40, 4), (44, "101.50"), (99, "101.00")])
        stop_limit = report(s, "stoplimit")
        assert (stop_limit[40], stop_limit[44], stop_limit[99]) == ("4", "101.50", "101.00")
        order(s, "market", 1, [(40, 1)])
        market = report(s, "market")
        assert market[40] == "1" and 44 not in market and 99 not in market
        order(s, "opg", 1, [(40, 2), (44, "90.00")], tif=2)
        opg = report(s, "opg")
        assert (opg[40], opg[44]) == ("2", "90.00")
        # Whatever the matcher made of them (accepted, or rejected with a reason), each is an
        # ExecutionReport the client's engine took: every refusal says why.
        for er in (stop, stop_limit, market, opg):
            assert er[150] != "8" or er[58]
        assert s.client.errors == []
        assert s.client.session_rejects() == [], "a stock client rejected what the exchange sent"


def test_at_the_close_is_not_fix42s(stack: Stack, tmp_path: Path) -> None:
    # 59=7 came with FIX 4.3: a FIX 4.2 session gets the engine's own session Reject for it.
    with stock_sessions(tmp_path, stack.fix_port, ["CLIENT42-07"], fix_version="4.2") as (s,):
        order(s, "moc", 1, [(40, 2), (44, "90.00")], tif=7)
        rej = s.client.wait("3")
        assert (rej[371], rej[373]) == ("59", "5")
        assert s.client.session_rejects() == []


@pytest.mark.parametrize(("comps", "fix_version", "exec_type"), [
    (["CLIENT13", "CLIENT14"], "4.4", "D"), (["CLIENT42-05", "CLIENT42-06"], "4.2", "D"),
    (["CLIENT50-06", "CLIENT50-07"], "5.0SP2", "L")])
def test_a_stop_triggered_by_a_trade_is_told_then_fills(stack: Stack, tmp_path: Path, comps: list[str],
                                                        fix_version: str, exec_type: str) -> None:
    # ExecType L (Triggered) is FIX 5.0 SP2's; stock FIX 4.4 and 4.2 have none: Restated (D) with 58.
    symbol_px = {"4.4": "97.00", "4.2": "96.00", "5.0SP2": "95.00"}[fix_version]  # one level per test
    with stock_sessions(tmp_path, stack.fix_port, comps, fix_version=fix_version) as (s, b):
        order(s, "bid", 1, [(40, 2), (44, symbol_px)], qty=6)  # 3 for the hit, 3 for the stop
        assert report(s, "bid")[150] == "0"
        order(s, "stp", 2, [(40, 3), (99, symbol_px)])
        new = report(s, "stp")
        assert (new[150], new[40], new[99]) == ("0", "3", symbol_px)
        order(b, "hit", 2, [(40, 2), (44, symbol_px)])  # a trade at the stop price triggers it
        trig = s.client.wait("8", lambda m: m.get(11) == "stp" and m.get(150) == exec_type)
        assert (trig[39], trig[40], trig[99]) == ("0", "3", symbol_px) and "triggered" in trig[58]
        fill = s.client.wait("8", lambda m: m.get(11) == "stp" and m.get(39) == "2")
        assert (fill[31], fill[40], fill[99]) == (symbol_px, "3", symbol_px)
        for c in (s.client, b.client):
            assert c.errors == []
            assert c.session_rejects() == [], "a stock client rejected what the exchange sent"
