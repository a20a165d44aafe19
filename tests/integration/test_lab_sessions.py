"""Lab sessions end to end against a plain QuickFIX acceptor: real Redis, real engines on loopback, the tap.

Each test drives the sessions only through the bus, as the web page does, and reads the lab stream.
"""

from __future__ import annotations

import time

import pytest
import redis

from services.gateway.lab.session import LabSession
from shared import streams
from shared.fix.tap import Tap, TapLoop
from tests.helpers import eventually
from tests.integration.test_lab_support import (
    Lab,
    command,
    lab_manager,
    lab_settings,
    plain_exchange,
    start_lab,
    tags,
)

pytestmark = pytest.mark.integration

GW = "gwlab"


def order(r: redis.Redis, lab_id: str, price: str = "100.00", qty: int = 5, side: int = 1) -> None:
    command(r, GW, lab_id, "order", symbol="ACORN.LAB", side=side, price=price, qty=qty)


def test_logon_order_cancel_replace_logout(redis_url: str) -> None:
    r = redis.Redis.from_url(redis_url)
    with plain_exchange() as exchange, lab_manager(redis_url, exchange.port) as manager:
        lab = Lab(r, "visitor-1")
        start_lab(r, lab.lab_id)
        first = eventually(lab.state, what="first LabState")
        assert first.gateway_id == GW and first.comp_id.startswith("LAB")
        logon_out = lab.wait_wire("client", "A")
        logon_in = lab.wait_wire("exchange", "A")
        assert tags(logon_out.raw)[49] == first.comp_id and tags(logon_out.raw)[141] == "Y"
        assert tags(logon_out.raw)[108] == "2" and tags(logon_in.raw)[56] == first.comp_id
        assert logon_out.n < logon_in.n and not logon_out.withheld
        st = eventually(lambda: next((s for s in lab.states() if s.status == "logged_on"
                                      and s.next_target_seq == 2), None), what="logged on with seqs")
        assert (st.next_sender_seq, st.next_target_seq) == (2, 2)
        assert (st.exchange_next_sender_seq, st.exchange_next_target_seq) == (2, 2)
        assert st.heartbeat_s == 2 and st.expires_at > st.ts

        order(r, lab.lab_id, price="100.50", qty=7)
        nos = lab.wait_wire("client", "D")
        clordid = tags(nos.raw)[11]
        assert tags(nos.raw)[44] == "100.50" and tags(nos.raw)[40] == "2" and tags(nos.raw)[59] == "0"
        lab.wait_wire("exchange", "8", t150="0", t11=clordid)
        st = eventually(lambda: (s := lab.state()) and s.orders and s.orders[0].status == "0" and s,
                        what="order New in state")
        assert (st.orders[0].clordid, st.orders[0].qty, st.orders[0].leaves_qty) == (clordid, 7, 7)

        command(r, GW, lab.lab_id, "replace", orig_clordid=clordid, price="101.00", qty=3)
        g = lab.wait_wire("client", "G")
        assert tags(g.raw)[41] == clordid and tags(g.raw)[44] == "101.00" and tags(g.raw)[38] == "3"
        new_id = tags(g.raw)[11]
        eventually(lambda: (s := lab.state()) and s.orders and s.orders[0].clordid == new_id
                   and s.orders[0].qty == 3, what="replaced order in state")

        command(r, GW, lab.lab_id, "cancel", orig_clordid=new_id)
        f = lab.wait_wire("client", "F")
        assert tags(f.raw)[41] == new_id
        lab.wait_wire("exchange", "8", t150="4")
        eventually(lambda: (s := lab.state()) and s.orders == () and s, what="no open orders")

        command(r, GW, lab.lab_id, "logout")
        lab.wait_wire("client", "5")
        lab.wait_wire("exchange", "5")
        end = lab.wait_status("ended")
        assert "visitor" in end.text
        assert r.exists(streams.lab_compid_key(first.comp_id)) == 0  # the CompID went back
        assert 0 < r.ttl(streams.lab_stream(lab.lab_id)) <= manager.settings.stream_ttl_s
        numbers = [w.n for w in lab.wire()]
        assert numbers == list(range(1, len(numbers) + 1))  # every record, in order
        assert manager.live_lab_ids() == []


def test_drop_next_is_recovered_by_resend_and_the_order_is_acked_once(redis_url: str) -> None:
    r = redis.Redis.from_url(redis_url)
    with plain_exchange() as exchange, lab_manager(redis_url, exchange.port):
        lab = Lab(r, "drop-1")
        start_lab(r, lab.lab_id)
        lab.wait_status("logged_on")
        command(r, GW, lab.lab_id, "drop_next")
        eventually(lambda: (s := lab.state()) and s.drop_armed, what="drop armed")
        order(r, lab.lab_id)
        withheld = eventually(lambda: [w for w in lab.wire() if w.withheld], what="a withheld message")
        assert tags(withheld[0].raw)[35] == "D"
        clordid = tags(withheld[0].raw)[11]
        seq = tags(withheld[0].raw)[34]
        eventually(lambda: (s := lab.state()) and not s.drop_armed, what="drop used up")
        order(r, lab.lab_id, price="99.00")  # the exchange sees the gap when this one arrives
        resend_req = lab.wait_wire("exchange", "2")
        assert tags(resend_req.raw)[7] == seq
        resent = lab.wait_wire("client", "D", t11=clordid, t43="Y")
        assert tags(resent.raw)[34] == seq and 122 in tags(resent.raw)
        lab.wait_wire("exchange", "8", t150="0", t11=clordid)
        eventually(lambda: len(lab.find("exchange", "8", t150="0")) == 2, what="both orders acked")
        assert len(lab.find("exchange", "8", t150="0", t11=clordid)) == 1
        assert len(exchange.orders(clordid)) == 1  # the exchange's application saw it once
        st = eventually(lambda: (s := lab.state()) and s.next_sender_seq == s.exchange_next_target_seq
                        and s, what="both ends agree after recovery")
        assert st.status == "logged_on"


def test_silent_session_is_given_up_by_the_exchange(redis_url: str) -> None:
    r = redis.Redis.from_url(redis_url)
    with plain_exchange() as exchange, lab_manager(redis_url, exchange.port, heartbeat_s=1):
        lab = Lab(r, "silent-1")
        start_lab(r, lab.lab_id)
        lab.wait_status("logged_on")
        command(r, GW, lab.lab_id, "silent")
        eventually(lambda: (s := lab.state()) and s.silent, what="silent in state")
        lab.wait_wire("exchange", "1")  # TestRequest
        end = lab.wait_status("ended", timeout=30)
        assert any(w.withheld and w.source == "client" for w in lab.wire())
        assert "silent" in end.text
        # The numbers the session ended with (not the engine's reset ones): the exchange missed some.
        assert end.exchange_next_target_seq < end.next_sender_seq
        assert r.exists(streams.lab_compid_key(end.comp_id)) == 0


def test_talk_again_before_the_timeout_recovers(redis_url: str) -> None:
    r = redis.Redis.from_url(redis_url)
    with plain_exchange() as exchange, lab_manager(redis_url, exchange.port, heartbeat_s=3):
        lab = Lab(r, "talk-1")
        start_lab(r, lab.lab_id)
        lab.wait_status("logged_on")
        command(r, GW, lab.lab_id, "silent")
        eventually(lambda: [w for w in lab.wire() if w.withheld], timeout=10, what="a withheld heartbeat")
        command(r, GW, lab.lab_id, "talk")
        eventually(lambda: (s := lab.state()) and not s.silent, what="talking in state")
        order(r, lab.lab_id)
        lab.wait_wire("exchange", "2")  # the exchange asks for what it missed
        lab.wait_wire("client", "4", t123="Y")  # the client's engine gap-fills its heartbeats
        nos = lab.wait_wire("client", "D")
        lab.wait_wire("exchange", "8", t150="0", t11=tags(nos.raw)[11])
        assert lab.state().status == "logged_on"  # type: ignore[union-attr]


def test_lifetime_ends_the_session_with_a_logout(redis_url: str) -> None:
    r = redis.Redis.from_url(redis_url)
    with plain_exchange() as exchange, lab_manager(redis_url, exchange.port, lifetime_s=3.0):
        lab = Lab(r, "short-1")
        start_lab(r, lab.lab_id)
        lab.wait_status("logged_on")
        logout = lab.wait_wire("client", "5", timeout=20)
        assert "over" in tags(logout.raw).get(58, "")
        lab.wait_wire("exchange", "5")
        assert "over" in lab.wait_status("ended").text


def test_stop_logs_out_every_session(redis_url: str) -> None:
    r = redis.Redis.from_url(redis_url)
    with plain_exchange() as exchange:
        with lab_manager(redis_url, exchange.port):
            labs = [Lab(r, f"stop-{i}") for i in range(2)]
            for lab in labs:
                start_lab(r, lab.lab_id)
            for lab in labs:
                lab.wait_status("logged_on")
        for lab in labs:
            assert lab.find("client", "5") and lab.find("exchange", "5")
            assert lab.state().status == "ended"  # type: ignore[union-attr]


def test_issue_14_commands_on_the_wire(redis_url: str) -> None:
    """TimeInForce, OrderStatusRequest, OrderMassCancelRequest, MarketDataRequest: what the visitor's
    engine sends, and that the exchange's engine (validating with the exchange's dictionary) takes it."""
    r = redis.Redis.from_url(redis_url)
    with plain_exchange() as exchange, lab_manager(redis_url, exchange.port):
        lab = Lab(r, "issue14-1")
        start_lab(r, lab.lab_id)
        lab.wait_status("logged_on")
        command(r, GW, lab.lab_id, "order", symbol="ACORN.LAB", side=2, price="101.00", qty=4, tif=3)
        nos = tags(lab.wait_wire("client", "D").raw)
        assert nos[59] == "3"
        clordid = nos[11]
        lab.wait_wire("exchange", "8", t150="0", t11=clordid)
        # The tap records the ack as it passes it on: the visitor's engine knows the OrderID (37),
        # which its OrderStatusRequest carries, only once it has taken the ack (its state says so).
        eventually(lambda: any(o.clordid == clordid and o.status == "0" for o in lab.orders()), 20,
                   what=f"the visitor's engine taking the ack of {clordid}")

        command(r, GW, lab.lab_id, "status", orig_clordid=clordid)
        h = tags(lab.wait_wire("client", "H").raw)
        assert (h[11], h[37], h[55], h[54]) == (clordid, f"X{clordid}", "ACORN.LAB", "2") and h[790]

        command(r, GW, lab.lab_id, "mass_cancel")
        q = tags(lab.wait_wire("client", "q").raw)
        assert q[530] == "7" and 55 not in q and q[11] and q[60]
        command(r, GW, lab.lab_id, "mass_cancel", symbol="BIRCH.LAB")
        q = tags(lab.wait_wire("client", "q", t530="1").raw)
        assert q[55] == "BIRCH.LAB"

        command(r, GW, lab.lab_id, "md_subscribe", symbol="ACORN.LAB", value="0")
        v = lab.wait_wire("client", "V", t263="1")
        text = v.raw.decode()
        assert "\x01267=3\x01269=0\x01269=1\x01269=2\x01" in text  # the entry types, as a group
        assert "\x01146=1\x0155=ACORN.LAB\x01" in text
        assert (tags(v.raw)[264], tags(v.raw)[265]) == ("0", "1")
        command(r, GW, lab.lab_id, "md_unsubscribe", symbol="ACORN.LAB")
        off = tags(lab.wait_wire("client", "V", t263="2").raw)
        assert off[262] == tags(v.raw)[262]

        # The exchange's engine validated each with the exchange's dictionary and handed it on.
        got = eventually(lambda: (m := [f for f in exchange.received() if f.get(35) in ("H", "q", "V")])
                         and len(m) == 5 and m, what="H, q, q, V, V at the exchange")
        assert [f[35] for f in got] == ["H", "q", "q", "V", "V"]
        assert not lab.find("exchange", "3")  # no session-level Reject of anything we sent

        command(r, GW, lab.lab_id, "stp", value="2")  # a plain exchange has no self-trade prevention
        lab.wait_notice("cannot be set on this gateway")
        command(r, GW, lab.lab_id, "md_unsubscribe", symbol="ACORN.LAB")
        lab.wait_notice("not subscribed")


def test_a_session_ended_before_its_engine_started_never_starts_it() -> None:
    """A visitor's Logout can end a session between its publication and its start (the manager
    shows it to commands first). The engine must then not start: QuickFIX's stop() on an initiator
    not yet started returns at once, and one started afterwards either ran on as a session nobody
    owned or, freed under its own thread, crashed the gateway (SIGSEGV in SocketInitiator::onStart)."""
    records: list[tuple[object, ...]] = []
    with plain_exchange() as exchange:
        loop = TapLoop().start()
        tap = Tap(loop, "127.0.0.1", exchange.port, lambda *a: records.append(a), lambda reason: None)
        tap.open()
        session = LabSession("early-end", "LAB001", GW, lab_settings(), tap, lambda m: None,
                             lambda s, reason: None)
        try:
            session.stop_engine()  # the ender thread came first
            session.start()
            time.sleep(1.5)  # an engine started anyway would have connected and logged on by now
            assert records == [] and not exchange.received()
        finally:
            session.stop_engine()
            tap.close()
            loop.stop()
