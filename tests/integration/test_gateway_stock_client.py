"""A newcomer's FIX client: QuickFIX with the stock FIX44.xml the quickfix package installs and strict
validation. Every kind of message the exchange sends reaches its application, and its engine never
answers one with a session Reject (35=3): an exchange sends, by default, only what the standard
dictionary lets its counterparties receive.

Covered: ExecutionReport New, PartiallyFilled, Filled (Trade), Replaced, Cancelled, Rejected by the
gateway and by the matcher, Order status (150=I); OrderCancelReject from both; OrderMassCancelReport;
SecurityList; the exchange's session Reject, its BusinessMessageReject, its ResendRequest, Heartbeats,
and its Logout when the gateway stops. (Market data W/X/Y: test_gateway_marketdata.py; every case of
H, q and x: test_gateway_status_masscancel.py.)
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import quickfix as fix

from tests.gateway_stack import Stack, gateway_stack, matcher_available, stop_process
from tests.stock_client import nos, stock_sessions

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not matcher_available(), reason="services.matcher is not in this checkout"),
]

@pytest.fixture
def stack() -> Iterator[Stack]:
    with gateway_stack(None) as s:
        yield s


def test_a_strict_stock_client_takes_every_message_the_exchange_sends(stack: Stack, tmp_path: Path) -> None:
    with stock_sessions(tmp_path, stack.fix_port, ["CLIENT09", "CLIENT10"]) as (sa, sb):
        a, b = sa.client, sb.client
        send_a = sa.send

        # New, then a trade: PartiallyFilled for the resting buyer, Filled for the seller.
        send_a("D", nos("sa-1", 1, 10, "99.50"))
        a.wait("8", lambda m: m.get(11) == "sa-1" and m.get(150) == "0")
        sb.send("D", nos("sb-1", 2, 4, "99.50"))
        a_fill = a.wait("8", lambda m: m.get(11) == "sa-1" and m.get(150) == "F")
        b_fill = b.wait("8", lambda m: m.get(11) == "sb-1" and m.get(150) == "F")
        assert (a_fill[39], b_fill[39]) == ("1", "2")
        # One trade, one match id on both sides, in SecondaryExecID; no TrdMatchID by default.
        assert a_fill[527] == b_fill[527] and a_fill[527]
        assert 880 not in a_fill and 880 not in b_fill
        # Replaced, Cancelled, then a cancel of the cancelled order: OrderCancelReject (matcher).
        now = time.strftime("%Y%m%d-%H:%M:%S", time.gmtime())
        send_a("G", [(41, "sa-1"), (11, "sa-2"), (55, "ACORN.LAB"), (54, 1), (60, now), (38, 8), (40, 2),
                     (44, "99.40")])
        a.wait("8", lambda m: m.get(11) == "sa-2" and m.get(150) == "5")
        send_a("F", [(41, "sa-2"), (11, "sa-3"), (55, "ACORN.LAB"), (54, 1), (60, now)])
        a.wait("8", lambda m: m.get(11) == "sa-3" and m.get(150) == "4")
        send_a("F", [(41, "sa-2"), (11, "sa-4"), (55, "ACORN.LAB"), (54, 1), (60, now)])
        a.wait("9", lambda m: m.get(11) == "sa-4")
        # Rejected by the gateway (off the tick grid) and by the matcher (a live ClOrdID again).
        send_a("D", nos("sa-5", 1, 1, "99.505"))
        a.wait("8", lambda m: m.get(11) == "sa-5" and m.get(150) == "8")
        send_a("D", nos("sa-6", 1, 1, "90.00"))
        a.wait("8", lambda m: m.get(11) == "sa-6" and m.get(150) == "0")
        send_a("D", nos("sa-6", 1, 1, "90.00"))
        a.wait("8", lambda m: m.get(11) == "sa-6" and m.get(150) == "8")
        # OrderCancelReject from the gateway: a replace for a symbol it does not trade.
        send_a("G", [(41, "sa-6"), (11, "sa-7"), (55, "NOPE.LAB"), (54, 1), (60, now), (38, 1), (40, 2),
                     (44, "1.00")])
        a.wait("9", lambda m: m.get(11) == "sa-7")
        # The exchange's session Reject: a NewOrderSingle without TransactTime (60).
        send_a("D", [(11, "sa-8"), (55, "ACORN.LAB"), (54, 1), (38, 1), (40, 2), (44, "99.00")])
        a.wait("3", lambda m: m.get(371) == "60")
        # Its BusinessMessageReject: an OrderMassStatusRequest, valid FIX 4.4 that it does not take.
        send_a("AF", [(584, "ms-1"), (585, 7)])
        a.wait("j", lambda m: m.get(372) == "AF")
        # An order status (ExecutionReport 150=I), a mass cancel report (r), the security list (y).
        send_a("H", [(11, "sa-6"), (55, "ACORN.LAB"), (54, 1)])
        assert a.wait("8", lambda m: m.get(11) == "sa-6" and m.get(150) == "I")[39] == "0"
        send_a("q", [(11, "sa-mc"), (530, 1), (55, "BIRCH.LAB"), (60, now)])
        assert a.wait("r", lambda m: m.get(11) == "sa-mc")[533] == "0"
        send_a("x", [(320, "sa-sl"), (559, 4)])
        assert a.wait("y", lambda m: m.get(320) == "sa-sl")[146] == "2"
        # Its ResendRequest: a gap in what the client sends (its engine answers with a GapFill), and
        # the session goes on.
        session = fix.Session.lookupSession(sa.sid)
        session.setNextSenderMsgSeqNum(session.getExpectedSenderNum() + 3)
        send_a("0", [])
        a.wait("2")
        send_a("D", nos("sa-9", 1, 1, "90.00"))
        a.wait("8", lambda m: m.get(11) == "sa-9" and m.get(150) == "0")
        a.wait("0")  # Heartbeats (HeartBtInt 1)
        # Its Logout, when the gateway stops with the session logged on.
        stop_process(stack.gateway)
        a.wait("5")
        b.wait("5")
    for client in (a, b):
        assert client.errors == []
        assert client.session_rejects() == [], "the stock client rejected what the exchange sent"
