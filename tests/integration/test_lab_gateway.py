"""Lab sessions in the real gateway process, against its acceptor and the matcher (real processes).

The gateway runs the LabManager itself (FIXLAB_LABS=1); the test speaks only to the bus, as the web
page does: LabStart, LabCommand, and the lab streams.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from shared import streams
from shared.schema import SessionEnded, decode_batch
from tests.gateway_stack import Stack, gateway_stack, matcher_available
from tests.helpers import eventually
from tests.integration.test_lab_support import Lab, command, start_lab, tags

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not matcher_available(), reason="services.matcher is not in this checkout yet"),
]

LAB_ENV = {"FIXLAB_LAB_HEARTBEAT_S": "2", "FIXLAB_LAB_LIFETIME_S": "120"}


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    """One stack (its own redis-server, matcher, gateway) for this module: each test uses its own labs."""
    with gateway_stack(None, labs=True, env=LAB_ENV) as s:
        yield s


def logged_on(r: redis.Redis, lab_id: str) -> Lab:
    lab = Lab(r, lab_id)
    start_lab(r, lab_id)
    lab.wait_status("logged_on", timeout=30)
    return lab


def test_two_lab_sessions_trade_with_each_other(stack: Stack) -> None:
    r = redis.Redis.from_url(stack.redis_url)
    buyer, seller = logged_on(r, "gw-buyer"), logged_on(r, "gw-seller")
    assert buyer.state().gateway_id == stack.gateway_id  # type: ignore[union-attr]
    command(r, stack.gateway_id, buyer.lab_id, "order", symbol="ACORN.LAB", side=1, price="100.00", qty=5)
    new = buyer.wait_wire("exchange", "8", t150="0")
    assert tags(new.raw)[39] == "0" and tags(new.raw)[151] == "5"
    eventually(lambda: (s := buyer.state()) and s.orders and s.orders[0].status == "0", what="resting")
    command(r, stack.gateway_id, seller.lab_id, "order", symbol="ACORN.LAB", side=2, price="100.00", qty=3)
    fill_b = tags(buyer.wait_wire("exchange", "8", t150="F").raw)
    fill_s = tags(seller.wait_wire("exchange", "8", t150="F").raw)
    assert fill_b[880] == fill_s[880]  # one trade, one TrdMatchID
    assert (fill_b[32], fill_b[39], fill_b[151]) == ("3", "1", "2")
    assert (fill_s[39], fill_s[151]) == ("2", "0")
    st = eventually(lambda: (s := buyer.state()) and s.orders and s.orders[0].cum_qty == 3 and s,
                    what="partial fill in the buyer's state")
    assert (st.orders[0].status, st.orders[0].leaves_qty) == ("1", 2)
    eventually(lambda: (s := seller.state()) and s.orders == (), what="seller's order done")
    command(r, stack.gateway_id, buyer.lab_id, "logout")
    buyer.wait_wire("exchange", "5")
    end = buyer.wait_status("ended")
    assert end.text
    # The acceptor tells the matcher the session ended, so its resting 2 are cancelled.
    eventually(lambda: any(isinstance(m, SessionEnded) and m.session == end.comp_id
                           for _, f in r.xrange(streams.orders_stream("0"))  # type: ignore[union-attr]
                           for m in decode_batch(f[streams.BATCH_FIELD])), what="SessionEnded")


def test_drop_next_against_the_gateway(stack: Stack) -> None:
    r = redis.Redis.from_url(stack.redis_url)
    lab = logged_on(r, "gw-drop")
    command(r, stack.gateway_id, lab.lab_id, "drop_next")
    eventually(lambda: (s := lab.state()) and s.drop_armed, what="drop armed")
    command(r, stack.gateway_id, lab.lab_id, "order", symbol="BIRCH.LAB", side=1, price="24.00", qty=1)
    withheld = eventually(lambda: [w for w in lab.wire() if w.withheld], what="the withheld order")
    clordid = tags(withheld[0].raw)[11]
    # Nothing else is sent: the next heartbeat shows the exchange the gap.
    lab.wait_wire("exchange", "2", timeout=20)
    lab.wait_wire("client", "D", t11=clordid, t43="Y")
    lab.wait_wire("exchange", "8", t150="0", t11=clordid)
    eventually(lambda: (s := lab.state()) and s.next_sender_seq == s.exchange_next_target_seq
               and s.next_target_seq == s.exchange_next_sender_seq, what="both ends agree")
    assert len(lab.find("exchange", "8", t150="0", t11=clordid)) == 1


def test_silent_against_the_gateway() -> None:
    # A stack of its own at HeartBtInt 6 (the lab's default): the exchange's Logout comes about
    # 2.0 x HeartBtInt into the silence and QuickFIX's own timeout at 2.4 x, both on the engine's
    # 1 s tick. At 2 s that left the watchdog about a second, and a loaded CI machine missed it once
    # (the engine cut the session first, no Logout); at 6 s it has more than two.
    with gateway_stack(None, labs=True, env={**LAB_ENV, "FIXLAB_LAB_HEARTBEAT_S": "6"}) as stack:
        _silent_against(stack)


def _silent_against(stack: Stack) -> None:
    r = redis.Redis.from_url(stack.redis_url)
    lab = logged_on(r, "gw-silent")
    command(r, stack.gateway_id, lab.lab_id, "silent")
    test_request = lab.wait_wire("exchange", "1", timeout=20)
    # The exchange's own Logout, saying why, before the engine ends the session.
    logout = lab.wait_wire("exchange", "5", timeout=20)
    assert tags(logout.raw)[58] == f"no answer to TestRequest {tags(test_request.raw)[112]}"
    assert logout.n > test_request.n
    end = lab.wait_status("ended", timeout=30)
    assert "silent" in end.text and "no answer to TestRequest" in end.text
    assert not [w for w in lab.wire() if w.source == "exchange" and w.n > logout.n]  # its last word
    assert end.exchange_next_target_seq < end.next_sender_seq
    assert stack.gateway.poll() is None  # the gateway is still up


def test_self_trade_prevention_set_by_a_lab_session(stack: Stack) -> None:
    """The page's setting reaches the gateway's translation: the session's own crossing order (the
    aggressor) is cancelled, saying why, and its resting order stays; off again, it trades."""
    r = redis.Redis.from_url(stack.redis_url)
    lab = logged_on(r, "gw-stp")
    gw = stack.gateway_id
    command(r, gw, lab.lab_id, "stp", value="2")  # cancel aggressor
    lab.wait_notice("cancel aggressor")
    command(r, gw, lab.lab_id, "order", symbol="BIRCH.LAB", side=1, price="26.10", qty=2)
    rest_id = tags(lab.wait_wire("exchange", "8", t150="0").raw)[11]
    command(r, gw, lab.lab_id, "order", symbol="BIRCH.LAB", side=2, price="26.10", qty=1)
    sell = lab.wait_wire("client", "D", t54="2")
    sell_id = tags(sell.raw)[11]
    gone = tags(lab.wait_wire("exchange", "8", t11=sell_id, t150="4").raw)
    assert gone[39] == "4" and gone[58].startswith("self-trade prevention") and gone[14] == "0"
    assert not lab.find("exchange", "8", t11=rest_id, t150="4")  # the resting order stands
    assert not lab.find("exchange", "8", t150="F")
    # Back to off: the same cross trades with itself (the sessions file's mode, none).
    command(r, gw, lab.lab_id, "stp", value="0")
    eventually(lambda: len([n for n in lab.notices() if "prevention for" in n.text]) == 2,
               what="the second setting's notice")
    command(r, gw, lab.lab_id, "order", symbol="BIRCH.LAB", side=2, price="26.10", qty=1)
    eventually(lambda: len(lab.find("exchange", "8", t150="F")) == 2, what="a self-trade: both sides filled")


def test_status_and_mass_cancel_against_the_gateway(stack: Stack) -> None:
    """H answered by an ExecutionReport ExecType I; q by an OrderMassCancelReport then a Cancelled
    ExecutionReport per order; all valid for the session's strict engine (no session Reject)."""
    r = redis.Redis.from_url(stack.redis_url)
    lab = logged_on(r, "gw-status")
    gw = stack.gateway_id
    command(r, gw, lab.lab_id, "order", symbol="BIRCH.LAB", side=2, price="27.30", qty=3)
    clordid = tags(lab.wait_wire("exchange", "8", t150="0").raw)[11]
    command(r, gw, lab.lab_id, "status", orig_clordid=clordid)
    status = tags(lab.wait_wire("exchange", "8", t150="I").raw)
    assert (status[11], status[39], status[151]) == (clordid, "0", "3")
    command(r, gw, lab.lab_id, "order", symbol="BIRCH.LAB", side=2, price="27.40", qty=1)
    eventually(lambda: len(lab.find("exchange", "8", t150="0")) == 2, what="second order New")
    command(r, gw, lab.lab_id, "mass_cancel", symbol="BIRCH.LAB")
    report = tags(lab.wait_wire("exchange", "r").raw)
    assert (report[530], report[531], report[533]) == ("1", "1", "2")
    eventually(lambda: len(lab.find("exchange", "8", t150="4")) == 2, what="two Cancelled reports")
    eventually(lambda: (s := lab.state()) and s.orders == () and s, what="no open orders left")
    assert not lab.find("exchange", "3") and not lab.find("client", "3")  # no session Reject either way


def test_market_data_against_the_gateway(stack: Stack) -> None:
    """V answered by a W, then an X as the book changes, each entry starting with its group's first
    field and valid for the session's strict engine (no session Reject either way)."""
    r = redis.Redis.from_url(stack.redis_url)
    lab = logged_on(r, "gw-md")
    gw = stack.gateway_id
    command(r, gw, lab.lab_id, "md_subscribe", symbol="BIRCH.LAB", value="0")
    w = tags(lab.wait_wire("exchange", "W").raw)
    assert w[55] == "BIRCH.LAB"
    command(r, gw, lab.lab_id, "order", symbol="BIRCH.LAB", side=2, price="27.70", qty=3)
    lab.wait_wire("exchange", "8", t150="0")
    x = lab.wait_wire("exchange", "X").raw.decode()
    assert "\x01268=1\x01279=0\x01269=1\x0155=BIRCH.LAB\x01270=27.7" in x and "\x01271=3\x01" in x
    command(r, gw, lab.lab_id, "md_unsubscribe", symbol="BIRCH.LAB")
    lab.wait_wire("client", "V", t263="2")
    assert not lab.find("exchange", "3") and not lab.find("client", "3")
