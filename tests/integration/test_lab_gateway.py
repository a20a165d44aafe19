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


def test_silent_against_the_gateway(stack: Stack) -> None:
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
