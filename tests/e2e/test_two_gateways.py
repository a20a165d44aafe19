"""Two gateways through the real runner (`FIXLAB_GATEWAYS=2 python -m services`) on one redis-server.

Stock QuickFIX clients (the installed FIX44.xml, every validation switch on) on gateway 1 and on
gateway 2 trade with each other; each gets its own ExecutionReports and none of the other's, and the
matcher's events for each went to the events stream of the gateway that owns the session (reply_to).
A CompID of gateway 2's range is refused at gateway 1. Lab sessions started from pages of the web
land on both gateways, each with a lab CompID of that gateway's range, and trade with the bots,
which are on both gateways too.
"""

from __future__ import annotations

import os
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from shared import streams
from shared.compids import gateway_comp_ids, gateway_of
from shared.redis_server import free_port
from shared.schema import decode_batch
from tests.e2e.runner_process import Runner, alive, runner, two_free_ports
from tests.e2e.webstack import Client
from tests.helpers import eventually
from tests.stock_client import nos, stock_sessions

pytestmark = pytest.mark.e2e

SOH = "\x01"
PRICE = "100.00"  # ACORN.LAB's reference price: the bots bid below it and offer above it


def logon_bytes(comp: str) -> bytes:
    now = time.strftime("%Y%m%d-%H:%M:%S", time.gmtime())
    body = f"35=A{SOH}49={comp}{SOH}56=FIXLAB{SOH}34=1{SOH}52={now}{SOH}98=0{SOH}108=30{SOH}141=Y{SOH}"
    head = f"8=FIX.4.4{SOH}9={len(body)}{SOH}"
    return f"{head}{body}10={sum((head + body).encode()) % 256:03d}{SOH}".encode()


def answer_to_logon(port: int, comp: str) -> bytes:
    """What the acceptor on ``port`` sends back to a Logon from ``comp`` before the connection ends
    or its first message is complete."""
    data = b""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(logon_bytes(comp))
        while f"{SOH}10=".encode() not in data:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
    return data


def events_by_session(r: redis.Redis, gateway_id: str) -> dict[str, list[str]]:
    """The matcher's events on ``gateway_id``'s events stream: session -> event types."""
    out: dict[str, list[str]] = {}
    for _id, fields in r.xrange(streams.shard_events_stream("0", gateway_id)):
        for msg in decode_batch(fields[streams.BATCH_FIELD]):
            session = getattr(msg, "session", None)
            if session is not None:
                out.setdefault(session, []).append(type(msg).__name__)
    return out


@pytest.fixture(scope="module")
def two(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Runner, int, int]]:
    fix_port, web_port = two_free_ports(), free_port()
    env = {"FIXLAB_RUN_DIR": str(tmp_path_factory.mktemp("run")), "FIXLAB_WEB_PORT": str(web_port),
           "FIXLAB_FIX_PORT": str(fix_port), "FIXLAB_GATEWAYS": "2", "FIXLAB_BOTS": "2",
           "FIXLAB_LAB_HEARTBEAT_S": "2", "FIXLAB_ORDER_BURST": "50", "FIXLAB_PAGES_PER_ADDRESS": "8"}
    with runner(env) as run:
        run.wait_line(r"the lab page: http://127\.0\.0\.1:", timeout=90)
        for k, id_ in ((1, "gw1"), (2, "gw2")):
            run.wait_line(rf"gateway {id_} ready on port {fix_port + k - 1} \(gateway {k} of 2", timeout=90)
        yield run, fix_port, web_port
        pids = run.started_pids()
        redis_port = run.find(r"private redis-server on redis://127\.0\.0\.1:(\d+)")
        assert run.stop() == 0
        assert redis_port is not None
        assert set(pids) == {"matcher", "gateway-1", "gateway-2", "web", "bots"}
        for pid in [p for ps in pids.values() for p in ps]:
            eventually(lambda pid=pid: not alive(pid), timeout=10, what=f"pid {pid} gone")


def test_the_runner_names_each_gateways_address_and_range(two: tuple[Runner, int, int]) -> None:
    run, fix_port, _ = two
    for k in (1, 2):
        m = run.find(rf"FIX acceptor gateway-{k}: 127\.0\.0\.1:(\d+) \(SenderCompID FIXLAB; (.*)\)")
        assert m is not None, run.tail()
        assert (int(m.group(1)), m.group(2)) == (fix_port + k - 1, gateway_comp_ids(k, 2).summary())


def test_stock_clients_on_two_gateways_trade_and_each_gets_only_its_own_reports(
        two: tuple[Runner, int, int], tmp_path: Path) -> None:
    run, fix_port, _ = two
    url = run.wait_line(r"private redis-server on (redis://\S+)").group(1)
    r = redis.Redis.from_url(url)
    try:
        # The bots are on both gateways: BOT01 on gateway 1, BOT05 on gateway 2 (each its own range).
        eventually(lambda: "BOT01" in events_by_session(r, "gw1") and "BOT05" in events_by_session(r, "gw2"),
                   timeout=60, what="each gateway's bot quoting")
        with stock_sessions(tmp_path, fix_port, ["CLIENT01"]) as (seller,), \
                stock_sessions(tmp_path, fix_port + 1, ["CLIENT09"]) as (buyer,):
            seller.send("D", nos("s1", 2, 5, PRICE))
            seller.client.wait("8", lambda m: m.get(11) == "s1" and m.get(150) == "0")
            buyer.send("D", nos("b1", 1, 5, PRICE))
            for client, clordid in ((seller.client, "s1"), (buyer.client, "b1")):
                fill = client.wait("8", lambda m, c=clordid: m.get(11) == c and m.get(150) == "F",
                                   timeout_s=20)
                assert (fill[31], fill[32], fill[39]) == (PRICE, "5", "2")
            reports = {c.comp: [(m[11], m[150]) for m in c.client.received if m.get(35) == "8"]
                       for c in (seller, buyer)}
            assert reports == {"CLIENT01": [("s1", "0"), ("s1", "F")], "CLIENT09": [("b1", "0"), ("b1", "F")]}
            assert seller.client.session_rejects() == buyer.client.session_rejects() == []
        # The matcher answered each command on the events stream of the gateway that sent it.
        one, two_ = events_by_session(r, "gw1"), events_by_session(r, "gw2")
        assert one["CLIENT01"][:2] == ["Accepted", "Filled"] and "CLIENT01" not in two_
        assert two_["CLIENT09"][:2] == ["Accepted", "Filled"] and "CLIENT09" not in one
        assert {gateway_of(s, 2) for s in one} == {1} and {gateway_of(s, 2) for s in two_} == {2}
    finally:
        r.close()


def test_a_compid_of_the_other_gateway_is_refused_at_logon(two: tuple[Runner, int, int]) -> None:
    _, fix_port, _ = two
    assert f"{SOH}35=A{SOH}".encode() in answer_to_logon(fix_port + 1, "CLIENT10")  # its own gateway
    assert f"{SOH}35=A{SOH}".encode() not in answer_to_logon(fix_port, "CLIENT10")  # the other one
    assert f"{SOH}35=A{SOH}".encode() not in answer_to_logon(fix_port + 1, "CLIENT02")


def test_lab_sessions_from_the_web_spread_over_both_gateways_and_trade(two: tuple[Runner, int, int]) -> None:
    _, _, web_port = two
    pages = [Client(f"ws://127.0.0.1:{web_port}/ws") for _ in range(4)]
    try:
        for page in pages:  # at once: each gateway takes one start at a time
            page.send({"op": "logon"})
        states = [p.wait("state", lambda m: m["status"] == "logged_on", timeout=30) for p in pages]
        placed = {(s["gateway_id"], s["comp_id"]) for s in states}
        assert len(placed) == 4  # four sessions, four lab CompIDs
        for gateway_id, comp_id in placed:
            assert comp_id in gateway_comp_ids(int(gateway_id[2:]), 2).labs, placed
        assert {g for g, _ in placed} == {"gw1", "gw2"}, placed
        for page in pages:
            depth = page.wait("depth", lambda m: m["symbol"] == "ACORN.LAB" and bool(m["asks"]), timeout=20)
            page.send({"op": "order", "symbol": "ACORN.LAB", "side": "buy", "price": depth["asks"][-1][0],
                       "qty": 1})
        for page in pages:
            fill = page.wait("fill", timeout=20)
            assert (fill["symbol"], fill["side"], fill["last_qty"]) == ("ACORN.LAB", "buy", "1")
    finally:
        for page in pages:
            page.close()


def test_a_restarted_gateway_sweeps_only_its_own_sessions(two: tuple[Runner, int, int],
                                                          tmp_path: Path) -> None:
    run, fix_port, _ = two
    url = run.wait_line(r"private redis-server on (redis://\S+)").group(1)
    r = redis.Redis.from_url(url)
    try:
        with stock_sessions(tmp_path, fix_port, ["CLIENT02"]) as (mine,), \
                stock_sessions(tmp_path, fix_port + 1, ["CLIENT11"]) as (theirs,):
            for session, clordid in ((mine, "keep"), (theirs, "swept")):
                session.send("D", nos(clordid, 1, 1, "90.00"))  # below every ask: it rests
                session.client.wait("8", lambda m, c=clordid: m.get(11) == c and m.get(150) == "0")
            ready = len([x for x in run.lines if "gateway gw2 ready on port" in x])
            # Gateway 2 dies without a word; the runner starts it again and it ends what its previous
            # life left open: its own range's sessions, CLIENT11 among them, and nothing of gateway 1's.
            os.kill(run.started_pids()["gateway-2"][-1], signal.SIGKILL)
            eventually(lambda: len([x for x in run.lines if "gateway gw2 ready on port" in x]) > ready,
                       timeout=60, what="gateway 2 restarted")
            eventually(lambda: "Cancelled" in events_by_session(r, "gw2").get("CLIENT11", []), timeout=30,
                       what="CLIENT11's order cancelled by gateway 2's sweep")
            # The sweep's SessionEnded went in CompID order: CLIENT02's, had it been swept, came first.
            assert "Cancelled" not in events_by_session(r, "gw1")["CLIENT02"]
            assert mine.client.find("8", lambda m: m.get(150) == "4") is None
    finally:
        r.close()
