"""The web service as a process against a real Redis: the WebSocket protocol, limits and bad input.

The test plays the gateway's part by hand where one is needed (it reads LabStart and LabCommand from
the bus and writes LabState and WireRecord back, as the gateway does); the whole stack with the real
gateway is in test_web_stack.py.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import redis
from websockets.exceptions import ConnectionClosed

from shared import streams
from shared.bus import publish
from shared.redis_server import RedisServer
from shared.schema import Depth, LabCommand, LabStart, LabState, Trade, WireRecord, decode_batch
from tests.e2e.webstack import Client, WebProcess, web_process
from tests.helpers import eventually

pytestmark = pytest.mark.integration

JSOND = dict[str, Any]


@pytest.fixture
def r(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


@pytest.fixture
def web(redis_url: str) -> Iterator[WebProcess]:
    # Two matcher shards: the market feed follows both shards' market streams.
    with web_process(redis_url, env={"FIXLAB_LAB_START_TIMEOUT": "30", "FIXLAB_PAGES_TOTAL": "3",
                                     "FIXLAB_SHARDS": "BIRCH.LAB:b"}) as w:
        yield w


def lab_starts(r: redis.Redis) -> list[LabStart]:
    out = []
    for _, fields in r.xrange(streams.LAB_START_STREAM):
        out += [m for m in decode_batch(fields[streams.BATCH_FIELD]) if isinstance(m, LabStart)]
    return out


def lab_commands(r: redis.Redis, gateway_id: str) -> list[LabCommand]:
    out = []
    for _, fields in r.xrange(streams.lab_commands_stream(gateway_id)):
        out += [m for m in decode_batch(fields[streams.BATCH_FIELD]) if isinstance(m, LabCommand)]
    return out


def state(lab_id: str, status: str = "logged_on", comp_id: str = "LAB001") -> LabState:
    return LabState(lab_id, "gwT", comp_id, status, 2, 2, 2, 2, 6, time.time_ns() + 600 * 10**9,
                    False, False, (), "", time.time_ns())


def fix(body: str) -> bytes:
    b = body.replace("|", "\x01").encode()
    head = b"8=FIX.4.4\x019=" + str(len(b)).encode() + b"\x01"
    return head + b + b"10=%03d\x01" % (sum(head + b) % 256)


def logged_on(c: Client, r: redis.Redis, comp_id: str = "LAB001") -> str:
    """Log the page on, answering as a gateway would; return the lab id."""
    c.send({"op": "logon"})
    lab_id = c.wait("logon_sent")["lab_id"]
    start = eventually(lambda: [s for s in lab_starts(r) if s.lab_id == lab_id], what="LabStart")[0]
    assert start.client_addr == "127.0.0.1"
    publish(r, streams.lab_stream(lab_id), [state(lab_id, comp_id=comp_id)], 1000)
    c.wait("state", lambda m: m["status"] == "logged_on")
    return str(lab_id)


def test_hello_and_market_snapshot_then_live(web: WebProcess, r: redis.Redis) -> None:
    publish(r, streams.shard_market_stream("0"), [Depth("ACORN.LAB", ((9990, 10, 2),), ((10010, 4, 1),), 1)],
            1000)
    c = Client(web.ws_url)
    try:
        hello = c.wait("hello")
        assert [i["symbol"] for i in hello["instruments"]] == ["ACORN.LAB", "BIRCH.LAB"]
        assert hello["limits"]["order_burst"] == 5 and hello["limits"]["open_orders"] == 20
        # The feed may have started before or after the entry: either way the page gets the book.
        d = c.wait("depth", lambda m: m["symbol"] == "ACORN.LAB")
        assert d["bids"] == [["99.90", 10, 2]] and d["asks"] == [["100.10", 4, 1]]
        publish(r, streams.shard_market_stream("b"), [Trade("BIRCH.LAB", 2501, 3, "M1", 2, 5)], 1000)
        t = c.wait("trade")
        assert (t["symbol"], t["price"], t["qty"], t["aggressor"]) == ("BIRCH.LAB", "25.01", 3, "sell")
    finally:
        c.close()


def test_session_round_trip_and_logout_when_the_page_closes(web: WebProcess, r: redis.Redis) -> None:
    c = Client(web.ws_url)
    lab_id = logged_on(c, r, comp_id="<img src=x onerror=alert(1)>")
    logon = fix("35=A|34=1|49=LAB001|52=20260101-12:00:00|56=FIXLAB|98=0|108=6|141=Y|")
    rec = WireRecord(lab_id, 1, "client", logon, False, time.time_ns())
    publish(r, streams.lab_stream(lab_id), [rec], 1000)
    w = c.wait("wire")
    assert (w["source"], w["msg_name"], w["category"], w["seq"]) == ("client", "Logon", "session", 1)
    assert [108, "HeartBtInt", "6", "", "body"] in w["fields"]
    assert w["raw"].startswith("8=FIX.4.4|9=")

    c.send({"op": "order", "symbol": "ACORN.LAB", "side": "buy", "price": "100.00", "qty": 10})
    c.send({"op": "drop_next"})
    cmds = eventually(lambda: len(lab_commands(r, "gwT")) >= 2 and lab_commands(r, "gwT"), what="commands")
    assert (cmds[0].op, cmds[0].symbol, cmds[0].side, cmds[0].price, cmds[0].qty) == \
        ("order", "ACORN.LAB", 1, "100.00", 10)
    assert cmds[1].op == "drop_next" and cmds[0].lab_id == lab_id

    c.send({"op": "logon"})
    assert "One FIX session per page" in c.wait("error")["text"]
    c.close()
    eventually(lambda: any(m.op == "logout" for m in lab_commands(r, "gwT")), what="logout on close")


def test_bad_input_gets_errors_and_the_page_survives(web: WebProcess) -> None:
    c = Client(web.ws_url)
    try:
        for frame, code_text in [("not json{", "not JSON"), ('{"op": "explode"}', "unknown op"),
                                 ("[]", "JSON object"),
                                 (json.dumps({"op": "ping", "id": "x" * 3000}), "limit"),
                                 (b"\x00\xff binary", "not JSON"),
                                 ('{"op": "order", "symbol": "ACORN.LAB", "side": "buy", "price": "1", '
                                  '"qty": 1}', "Log on first"),
                                 ('{"op": "cancel", "clordid": "<script>"}', "Log on first")]:
            c.send(frame)
            e = c.wait("error")
            assert code_text in e["text"], (frame, e)
        c.send({"op": "ping", "id": 42})
        assert c.wait("pong")["id"] == "42"
    finally:
        c.close()


def test_oversize_frame_closes_only_that_page(web: WebProcess) -> None:
    c = Client(web.ws_url)
    c.wait("hello")
    c.send("x" * 200_000)  # over uvicorn's frame limit: that WebSocket is closed
    with pytest.raises(ConnectionClosed):
        for _ in range(100):
            c.ws.recv(timeout=10)
    other = Client(web.ws_url)
    try:
        other.send({"op": "ping"})
        other.wait("pong")
    finally:
        other.close()


def test_pages_per_address_and_across_the_site(web: WebProcess) -> None:
    a, b = Client(web.ws_url), Client(web.ws_url)
    try:
        a.wait("hello")
        b.wait("hello")
        third = Client(web.ws_url)
        e = third.wait("error")
        assert e["code"] == "page_limit" and "2 lab pages" in e["text"]
        with pytest.raises(ConnectionClosed) as closed:
            third.ws.recv(timeout=10)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008
        b.close()
        # The slot comes back once the page is gone.
        eventually(lambda: _admitted(web.ws_url), what="a page slot freed")
    finally:
        a.close()
        b.close()


def _admitted(url: str) -> bool:
    c = Client(url)
    try:
        return c.wait("hello", timeout=5) is not None and not any(m.get("type") == "error" for m in c.got)
    except ConnectionClosed:  # refused: the closed page's slot is not free yet
        return False
    finally:
        c.close()


def test_order_flood_is_rate_limited(web: WebProcess, r: redis.Redis) -> None:
    c = Client(web.ws_url)
    try:
        logged_on(c, r)
        order = {"op": "order", "symbol": "ACORN.LAB", "side": "sell", "price": "101", "qty": 1}
        for i in range(30):
            c.send({**order, "id": i})
        errors = [c.wait("error", lambda m: m["code"] == "rate_limited") for _ in range(20)]
        assert "up to 5 orders at once, then 2 per second" in errors[0]["text"]
        sent = eventually(lambda: lab_commands(r, "gwT"), what="orders on the bus")
        assert 5 <= len(sent) <= 10  # the burst, plus what the rate refilled meanwhile
    finally:
        c.close()


def test_no_gateway_is_a_clear_error(redis_url: str) -> None:
    with web_process(redis_url, env={"FIXLAB_LAB_START_TIMEOUT": "0.5"}) as w:
        c = Client(w.ws_url)
        try:
            c.send({"op": "logon"})
            e = c.wait("error", lambda m: m["code"] == "no_gateway")
            assert "No exchange gateway" in e["text"]
            c.wait("state", lambda m: m["status"] == "ended")
            c.send({"op": "silent"})
            assert "Log on first" in c.wait("error")["text"]
        finally:
            c.close()


def test_a_page_that_cannot_keep_up_is_dropped_not_the_server(redis_url: str, r: redis.Redis) -> None:
    # Every market entry goes out (no conflation), so 300 depths are 300 messages for the page.
    with web_process(redis_url, env={"FIXLAB_WS_QUEUE": "10", "FIXLAB_MARKET_INTERVAL": "0"}) as w:
        slow = Client(w.ws_url)  # never reads
        big = tuple((10000 + i, 1, 1) for i in range(400))
        for i in range(300):
            publish(r, streams.shard_market_stream("0"), [Depth("ACORN.LAB", big, big, i)], 100_000)
        status = eventually(lambda: _status(w)["web"].get("pages_dropped", 0) >= 1 and _status(w),
                            timeout=30, what="the slow page dropped")
        assert status["web"]["pages"] == 0
        fresh = Client(w.ws_url)
        try:
            fresh.send({"op": "ping"})
            fresh.wait("pong")
        finally:
            fresh.close()
            slow.close()


def _status(w: WebProcess) -> JSOND:
    resp = httpx.get(f"{w.url}/api/status", timeout=10)
    assert resp.status_code == 200
    return dict(resp.json())


def test_status_view_lists_streams_and_instances(web: WebProcess, r: redis.Redis) -> None:
    r.xgroup_create(streams.LAB_START_STREAM, streams.GATEWAY_GROUP, id="0", mkstream=True)
    s = eventually(lambda: (st := _status(web))["instances"] and st, what="web's health report")
    assert any(i["service"] == "web" for i in s["instances"])
    names = {x["stream"]: x for x in s["streams"]}
    assert names[streams.LAB_START_STREAM]["groups"][0]["name"] == streams.GATEWAY_GROUP
    assert s["limits"]["pages_per_address"] == 2
    page = httpx.get(f"{web.url}/status", timeout=10)
    assert page.status_code == 200 and "The bus" in page.text
    index = httpx.get(f"{web.url}/", timeout=10)
    assert index.status_code == 200 and "FIX Lab" in index.text


def test_redis_outage_is_an_error_on_the_page_then_recovers(fresh_redis: RedisServer) -> None:
    with web_process(fresh_redis.url) as w:
        c = Client(w.ws_url)
        try:
            c.wait("hello")
            fresh_redis.stop()
            c.send({"op": "logon"})
            assert c.wait("error", lambda m: m["code"] == "unavailable", timeout=30)
            fresh_redis.start()
            r = redis.Redis.from_url(fresh_redis.url)
            try:
                c.send({"op": "logon"})
                lab_id = c.wait("logon_sent", timeout=30)["lab_id"]
                assert eventually(lambda: [s for s in lab_starts(r) if s.lab_id == lab_id], what="LabStart")
            finally:
                r.close()
        finally:
            c.close()


def test_a_page_of_another_origin_cannot_open_a_lab_websocket(web: WebProcess) -> None:
    from websockets.exceptions import InvalidStatus
    from websockets.sync.client import connect

    with pytest.raises(InvalidStatus) as refused, \
            connect(web.ws_url, origin="http://evil.example", open_timeout=10):  # type: ignore[arg-type]
        pass
    assert refused.value.response.status_code == 403
    with connect(web.ws_url, origin=f"http://127.0.0.1:{web.port}", open_timeout=10) as own:  # type: ignore[arg-type]
        assert json.loads(own.recv(timeout=10))["type"] == "hello"


def test_issue_14_commands_reach_the_bus_and_md_book_follows_the_wire(web: WebProcess,
                                                                       r: redis.Redis) -> None:
    c = Client(web.ws_url)
    try:
        lab_id = logged_on(c, r)
        c.send({"op": "order", "symbol": "ACORN.LAB", "side": "sell", "price": "100.00", "qty": 2,
                "tif": "ioc"})
        c.send({"op": "status", "clordid": "abc-1"})
        c.send({"op": "mass_cancel", "symbol": "BIRCH.LAB"})
        c.send({"op": "md_subscribe", "symbol": "ACORN.LAB"})
        c.send({"op": "stp", "mode": "cancel_both"})
        c.send({"op": "order", "symbol": "ACORN.LAB", "side": "buy", "price": "1", "qty": 1, "tif": "gtd"})
        assert "tif must be one of day" in c.wait("error")["text"]
        cmds = eventually(lambda: len(lab_commands(r, "gwT")) >= 5 and lab_commands(r, "gwT"),
                          what="commands")
        got = [(m.op, m.symbol, m.side, m.tif, m.orig_clordid, m.value) for m in cmds]
        assert got == [("order", "ACORN.LAB", 2, 3, "", ""), ("status", "", 0, 0, "abc-1", ""),
                       ("mass_cancel", "BIRCH.LAB", 0, 0, "", ""),
                       ("md_subscribe", "ACORN.LAB", 0, 0, "", "0"), ("stp", "", 0, 0, "", "3")]

        # The session's W then X, as the tap records them: the page gets the book they rebuild.
        head = "49=FIXLAB|52=20260101-12:00:00|56=LAB001|"
        w = fix(f"35=W|34=3|{head}262=r1|55=ACORN.LAB|268=2|269=0|270=99.90|271=10|346=2|"
                "269=1|270=100.10|271=4|346=1|")
        x = fix(f"35=X|34=4|{head}262=r1|268=1|279=2|269=1|55=ACORN.LAB|270=100.10|")
        now = time.time_ns()
        publish(r, streams.lab_stream(lab_id), [WireRecord(lab_id, 2, "exchange", w, False, now),
                                                WireRecord(lab_id, 3, "exchange", x, False, now)], 1000)
        wire = c.wait("wire", lambda m: m["msg_type"] == "W")
        group = next(n for n in wire["tree"] if isinstance(n, dict))
        assert group["group"][:3] == [268, "NoMDEntries", "2"] and len(group["entries"]) == 2
        assert group["entries"][0][0] == [269, "MDEntryType", "0", "Bid", "body"]
        first = c.wait("md_book")
        assert (first["bids"], first["asks"]) == ([["99.90", 10, 2]], [["100.10", 4, 1]])
        second = c.wait("md_book")
        assert (second["symbol"], second["bids"], second["asks"]) == ("ACORN.LAB", [["99.90", 10, 2]], [])
    finally:
        c.close()
