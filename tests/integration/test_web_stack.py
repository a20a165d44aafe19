"""The web service against the real stack: Redis, matcher, gateway (lab sessions) and the bots.

A WebSocket client plays the page: it logs on, trades against the bots, cancels and replaces,
loses a message on purpose and watches the engines recover it, and closes the page.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import redis

from shared import streams
from shared.schema import LabState, decode_batch
from tests.e2e.webstack import Client, WebProcess, bots_process, web_process
from tests.gateway_stack import Stack, gateway_stack, matcher_available
from tests.helpers import eventually

pytestmark = pytest.mark.integration

if not matcher_available():
    pytest.skip("services.matcher is not in this checkout yet", allow_module_level=True)

LAB_ENV = {"FIXLAB_LAB_HEARTBEAT_S": "2"}


@dataclass
class Lab:
    stack: Stack
    web: WebProcess


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    # A private redis-server: this module's stack outlives single tests, which flush the shared one.
    with gateway_stack(None, labs=True, env=LAB_ENV, gateway_id="gwweb") as stack, \
            bots_process(stack.redis_url, stack.fix_port), \
            web_process(stack.redis_url, env={"FIXLAB_ORDER_BURST": "50"}) as web:
        yield Lab(stack, web)


def wire_names(c: Client, source: str) -> list[str]:
    return [m["msg_name"] for m in c.seen if m.get("type") == "wire" and m["source"] == source]


def book_has_asks(c: Client, symbol: str) -> bool:
    return any(m.get("type") == "depth" and m["symbol"] == symbol and m["asks"] for m in c.seen)


def test_logon_trade_cancel_replace_and_drop(lab: Lab) -> None:
    c = Client(lab.web.ws_url)
    try:
        c.send({"op": "logon"})
        lab_id = c.wait("logon_sent")["lab_id"]
        st = c.wait("state", lambda m: m["status"] == "logged_on", timeout=20)
        assert st["comp_id"].startswith("LAB") and st["heartbeat_s"] == 2 and st["expires_in_s"] > 0
        logon = c.wait("wire", lambda m: m["msg_type"] == "A" and m["source"] == "exchange")
        named = {f[0]: f for f in logon["fields"]}
        assert named[108][1:3] == ["HeartBtInt", "2"] and named[35][3] == "Logon"
        assert named[49][1:3] == ["SenderCompID", "FIXLAB"] and named[10][4] == "trailer"

        # Buy through the bots' best ask: an ExecutionReport New, then a fill.
        eventually(lambda: c.wait("depth", lambda m: m["symbol"] == "ACORN.LAB" and bool(m["asks"]),
                                  timeout=1), timeout=20, what="the bots' asks")
        books = [m for m in c.seen if m.get("type") == "depth" and m["symbol"] == "ACORN.LAB"]
        best_ask = books[-1]["asks"][0]
        c.send({"op": "order", "symbol": "ACORN.LAB", "side": "buy", "price": best_ask[0], "qty": 1})
        new = c.wait("wire", lambda m: m["msg_type"] == "8" and [150, "ExecType", "0", "New", "body"]
                     in m["fields"])
        assert new["source"] == "exchange"
        fill = c.wait("fill", timeout=15)
        assert (fill["symbol"], fill["side"], fill["last_px"], fill["last_qty"]) == \
            ("ACORN.LAB", "buy", best_ask[0], "1")
        c.wait("trade", lambda m: m["symbol"] == "ACORN.LAB")

        # A resting order: cancel it; another: replace it.
        c.send({"op": "order", "symbol": "BIRCH.LAB", "side": "buy", "price": "20.50", "qty": 3})
        resting = c.wait("state", lambda m: any(o["price"] == "20.50" for o in m["orders"]))
        clordid = next(o["clordid"] for o in resting["orders"] if o["price"] == "20.50")
        c.send({"op": "cancel", "clordid": clordid})
        c.wait("wire", lambda m: m["msg_type"] == "8" and [150, "ExecType", "4", "Canceled", "body"]
               in m["fields"])
        c.send({"op": "order", "symbol": "BIRCH.LAB", "side": "sell", "price": "29.00", "qty": 2})
        resting = c.wait("state", lambda m: any(o["price"] == "29.00" for o in m["orders"]))
        clordid = next(o["clordid"] for o in resting["orders"] if o["price"] == "29.00")
        c.send({"op": "replace", "clordid": clordid, "price": "29.50", "qty": 4})
        c.wait("wire", lambda m: m["msg_type"] == "8" and [150, "ExecType", "5", "Replaced", "body"]
               in m["fields"])
        c.send({"op": "cancel", "clordid": "no-such-order"})
        c.wait("notice", lambda m: "no-such-order" in m["text"])  # the gateway's own refusal

        # Lose the next message on purpose: the exchange asks for it again.
        c.send({"op": "drop_next"})
        c.wait("state", lambda m: m["drop_armed"])
        c.send({"op": "order", "symbol": "BIRCH.LAB", "side": "buy", "price": "21.00", "qty": 1})
        c.wait("wire", lambda m: m["withheld"] and m["source"] == "client", timeout=15)
        c.send({"op": "order", "symbol": "BIRCH.LAB", "side": "buy", "price": "21.01", "qty": 1})
        c.wait("wire", lambda m: m["msg_name"] == "ResendRequest" and m["source"] == "exchange", timeout=15)
    finally:
        c.close()
    # The page closed: its session is logged out and ends.
    r = redis.Redis.from_url(lab.stack.redis_url)
    try:
        eventually(lambda: _status(r, lab_id) in ("ended", "logged_out"), timeout=20, what="session ended")
    finally:
        r.close()


def _status(r: redis.Redis, lab_id: str) -> str:
    status = ""
    for _, fields in r.xrange(streams.lab_stream(lab_id)):
        for m in decode_batch(fields[streams.BATCH_FIELD]):
            if isinstance(m, LabState):
                status = m.status
    return status


def test_bots_quote_a_level_again_after_it_trades(lab: Lab) -> None:
    c = Client(lab.web.ws_url)
    try:
        c.send({"op": "logon"})
        c.wait("state", lambda m: m["status"] == "logged_on", timeout=20)
        def whole(m: dict[str, Any]) -> bool:
            return bool(m["symbol"] == "BIRCH.LAB" and len(m["asks"]) >= 6)

        full = eventually(lambda: c.wait("depth", whole, timeout=1), timeout=30, what="the bots' ladder")
        price, qty, _ = full["asks"][0]
        c.got.clear()
        c.send({"op": "order", "symbol": "BIRCH.LAB", "side": "buy", "price": price, "qty": qty})
        c.wait("trade", lambda m: m["symbol"] == "BIRCH.LAB" and m["price"] == price, timeout=15)
        c.wait("depth", lambda m: m["symbol"] == "BIRCH.LAB" and all(a[0] != price for a in m["asks"]))
        c.wait("depth", lambda m: m["symbol"] == "BIRCH.LAB" and bool(m["asks"]) and m["asks"][0][0] == price,
               timeout=15)
    finally:
        c.close()


def test_status_view_counts_the_stack(lab: Lab) -> None:
    def status() -> dict[str, Any]:
        return dict(httpx.get(f"{lab.web.url}/api/status", timeout=10).json())

    s = eventually(lambda: (st := status())["fix_sessions"] >= 2 and st, timeout=20, what="bots logged on")
    services = {i["service"] for i in s["instances"]}
    assert {"matcher", "gateway", "web", "bots"} <= services
    assert any(x["stream"] == streams.shard_market_stream("0") for x in s["streams"])
    assert isinstance(s["orders_per_s"], float) and s["pending"] >= 0


def test_silent_session_is_given_up_by_the_exchange(lab: Lab) -> None:
    c = Client(lab.web.ws_url)
    try:
        c.send({"op": "logon"})
        first = c.wait("logon_sent")["lab_id"]
        c.wait("state", lambda m: m["lab_id"] == first and m["status"] == "logged_on", timeout=20)
        c.send({"op": "silent"})
        c.wait("state", lambda m: m["silent"])
        tr = c.wait("wire", lambda m: m["msg_name"] == "TestRequest" and m["source"] == "exchange",
                    timeout=20)
        # The exchange gives up with a Logout of its own engine, saying why, then ends the session.
        logout = c.wait("wire", lambda m: m["msg_name"] == "Logout" and m["source"] == "exchange", timeout=20)
        test_req_id = next(f[2] for f in tr["fields"] if f[0] == 112)
        assert [f[2] for f in logout["fields"] if f[0] == 58] == [f"no answer to TestRequest {test_req_id}"]
        assert logout["seq"] > tr["seq"]
        ended = c.wait("state", lambda m: m["status"] in ("logged_out", "ended"), timeout=20)
        assert "no answer to TestRequest" in ended["text"]
        # The page may log on again once its session is over.
        c.send({"op": "logon"})
        again = c.wait("logon_sent")["lab_id"]
        c.wait("state", lambda m: m["lab_id"] == again and m["status"] == "logged_on", timeout=20)
        c.send({"op": "logout"})
        c.wait("wire", lambda m: m["msg_name"] == "Logout" and m["source"] == "client", timeout=20)
    finally:
        c.close()


@pytest.mark.parametrize("version, pool, begin, fill_type", [
    ("4.2", "LAB42-", "FIX.4.2", ["2", "Fill"]),
    ("5.0SP2", "LAB50-", "FIXT.1.1", ["F", "Trade"]),
])
def test_a_lab_session_in_another_version_is_named_with_its_dictionary(
        lab: Lab, version: str, pool: str, begin: str, fill_type: list[str]) -> None:
    c = Client(lab.web.ws_url)
    try:
        c.send({"op": "logon", "version": version})
        c.wait("logon_sent")
        st = c.wait("state", lambda m: m["status"] == "logged_on", timeout=20)
        assert st["comp_id"].startswith(pool)
        logon = c.wait("wire", lambda m: m["msg_type"] == "A" and m["source"] == "client")
        named = {f[0]: f for f in logon["fields"]}
        assert named[8][1:3] == ["BeginString", begin]
        if version == "5.0SP2":  # FIXT11.xml's header and Logon, FIX50SP2.xml's messages
            assert named[1137][1:3] == ["DefaultApplVerID", "9"]

        eventually(lambda: c.wait("depth", lambda m: m["symbol"] == "ACORN.LAB" and bool(m["asks"]),
                                  timeout=1), timeout=20, what="the bots' asks")
        books = [m for m in c.seen if m.get("type") == "depth" and m["symbol"] == "ACORN.LAB"]
        best_ask = books[-1]["asks"][0]
        c.send({"op": "order", "symbol": "ACORN.LAB", "side": "buy", "price": best_ask[0], "qty": 1})
        fill = c.wait("wire", lambda m: m["msg_type"] == "8" and m["source"] == "exchange"
                      and any(f[0] == 32 for f in m["fields"]), timeout=15)
        fields = {f[0]: f for f in fill["fields"]}
        assert fields[150][1:4] == ["ExecType", *fill_type]
        if version == "4.2":  # FIX42.xml: ExecTransType, and the match id in Text
            assert fields[20][1:4] == ["ExecTransType", "0", "New"]
            assert fields[58][2].startswith("TrdMatchID=")
        else:
            assert fields[880][1] == "TrdMatchID"
            # The session's own market data: a W carries LastUpdateTime (779), required in 5.0 SP2.
            c.send({"op": "md_subscribe", "symbol": "ACORN.LAB"})
            snap = c.wait("wire", lambda m: m["msg_type"] == "W" and m["source"] == "exchange", timeout=15)
            assert {f[0]: f for f in snap["fields"]}[779][1] == "LastUpdateTime"
        assert c.wait("fill", timeout=15)["last_qty"] == "1"  # the page's fill line, in either version
        sent = c.wait("wire", lambda m: m["msg_type"] == "D" and m["source"] == "client")
        assert not any(m.get("type") == "wire" and m["msg_type"] == "3" for m in c.seen)  # no Reject
        if version == "4.2":
            assert {f[0]: f for f in sent["fields"]}[21][1] == "HandlInst"
        c.send({"op": "logout"})
        c.wait("state", lambda m: m["status"] == "ended", timeout=20)
    finally:
        c.close()


@pytest.mark.parametrize("version", ["4.4", "4.2", "5.0SP2"])
def test_market_stop_and_stop_limit_orders_from_the_page_in_each_version(lab: Lab, version: str) -> None:
    """Issue 31's ticket: ord_type and stop_px from the page's command become 40/44/99/59 on the visitor's
    own wire in its version (HandlInst in 4.2), and the exchange's reports echo them; no session Reject."""
    c = Client(lab.web.ws_url)
    try:
        c.send({"op": "logon", "version": version})
        c.wait("logon_sent")
        c.wait("state", lambda m: m["status"] == "logged_on", timeout=20)
        eventually(lambda: c.wait("depth", lambda m: m["symbol"] == "ACORN.LAB" and bool(m["asks"]),
                                  timeout=1), timeout=20, what="the bots' asks")
        base = {"op": "order", "symbol": "ACORN.LAB", "qty": 1}
        c.send({**base, "side": "sell", "ord_type": "stop", "stop_px": "80.00", "tif": "gtc"})
        c.send({**base, "side": "buy", "ord_type": "stop_limit", "price": "120.00", "stop_px": "119.50"})
        c.send({**base, "side": "buy", "ord_type": "market", "tif": "ioc"})

        def wire(source: str, msg_type: str, ord_type: str) -> dict[int, list[Any]]:
            """The fields, by tag, of the first such message with OrdType (40) ``ord_type``."""
            def fits(m: dict[str, Any]) -> bool:
                return m["source"] == source and m["msg_type"] == msg_type \
                    and [f[2] for f in m["fields"] if f[0] == 40] == [ord_type]
            return {f[0]: f for f in c.wait("wire", fits, timeout=15)["fields"]}

        stop, stop_limit, market = (wire("client", "D", t) for t in ("3", "4", "1"))
        assert (stop[99][2], stop[59][2], 44 in stop) == ("80.00", "1", False)
        assert (stop_limit[44][2], stop_limit[99][2], stop_limit[59][2]) == ("120.00", "119.50", "0")
        assert (market[59][2], 44 in market, 99 in market) == ("3", False, False)
        if version == "4.2":
            assert all(m[21][1] == "HandlInst" for m in (stop, stop_limit, market))
        held = wire("exchange", "8", "3")
        assert (held[150][2], held[99][2], 44 in held) == ("0", "80.00", False)
        held_limit = wire("exchange", "8", "4")
        assert (held_limit[150][2], held_limit[44][2], held_limit[99][2]) == ("0", "120.00", "119.50")
        filled = c.wait("fill", timeout=15)
        assert filled["last_qty"] == "1" and filled["side"] == "buy"
        assert not any(m.get("type") == "wire" and m["msg_type"] == "3" for m in c.seen)  # no Reject
        c.send({"op": "logout"})
        c.wait("state", lambda m: m["status"] == "ended", timeout=20)
    finally:
        c.close()
