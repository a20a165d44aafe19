"""A newcomer's FIX client: QuickFIX with the stock FIX44.xml the quickfix package installs and strict
validation. Every kind of message the exchange sends reaches its application, and its engine never
answers one with a session Reject (35=3): an exchange sends, by default, only what the standard
dictionary lets its counterparties receive.

Covered: ExecutionReport New, PartiallyFilled, Filled (Trade), Replaced, Cancelled, Rejected by the
gateway and by the matcher, Order status (150=I); OrderCancelReject from both; OrderMassCancelReport;
SecurityList; the exchange's session Reject, its BusinessMessageReject, its ResendRequest, Heartbeats,
and its Logout when the gateway stops. (Market data W/X/Y: test_gateway_marketdata.py; every case of
H, q and x: test_gateway_status_masscancel.py.)

The same matrix runs for each version the exchange speaks (shared.fix.versions), each client with its
version's stock dictionary: FIX 4.2 (fills are ExecType 1 and 2 with ExecTransType 0, the match id in
Text; an order status is ExecTransType 3; no q nor x in 4.2: the exchange's engine answers them with a
session Reject, Invalid MsgType) and FIXT.1.1 / FIX 5.0 SP2 (TrdMatchID 880 beside 527 on every fill).
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


# Per version: the two CompIDs, ExecType of the buyer's and the seller's fill, a message type the
# version defines and the exchange does not take (answered with a BusinessMessageReject).
VERSIONS = {
    "4.4": (("CLIENT09", "CLIENT10"), ("F", "F"), ("AF", [(584, "ms-1"), (585, 7)])),
    "4.2": (("CLIENT42-01", "CLIENT42-02"), ("1", "2"), ("R", [(131, "qr-1"), (146, 1), (55, "ACORN.LAB")])),
    "5.0SP2": (("CLIENT50-01", "CLIENT50-02"), ("F", "F"), ("AF", [(584, "ms-1"), (585, 7)])),
}


def match_id(fill: dict[int, str], fix_version: str) -> str:
    """The trade's match id as a fill of ``fix_version`` carries it."""
    if fix_version == "4.2":  # no SecondaryExecID nor TrdMatchID in FIX 4.2: Text
        assert 527 not in fill and 880 not in fill and fill[20] == "0"
        return fill[58].removeprefix("TrdMatchID=")
    if fix_version == "5.0SP2":  # TrdMatchID is a standard field of 5.0 SP2's ExecutionReport
        assert fill[880] == fill[527]
    else:  # FIX 4.4 sessions get no TrdMatchID by default
        assert 880 not in fill
    return fill[527]


@pytest.mark.parametrize("fix_version", list(VERSIONS))
def test_a_strict_stock_client_takes_every_message_the_exchange_sends(stack: Stack, tmp_path: Path,
                                                                      fix_version: str) -> None:
    comps, (a_type, b_type), (unsupported, unsupported_body) = VERSIONS[fix_version]
    hi = fix_version == "4.2"  # FIX 4.2 requires HandlInst (21) in D and G
    with stock_sessions(tmp_path, stack.fix_port, list(comps), fix_version=fix_version) as (sa, sb):
        a, b = sa.client, sb.client
        send_a = sa.send

        # New, then a trade: PartiallyFilled for the resting buyer, Filled for the seller.
        send_a("D", nos("sa-1", 1, 10, "99.50", hi))
        a.wait("8", lambda m: m.get(11) == "sa-1" and m.get(150) == "0")
        sb.send("D", nos("sb-1", 2, 4, "99.50", hi))
        a_fill = a.wait("8", lambda m: m.get(11) == "sa-1" and m.get(150) == a_type)
        b_fill = b.wait("8", lambda m: m.get(11) == "sb-1" and m.get(150) == b_type)
        assert (a_fill[39], b_fill[39]) == ("1", "2")
        # One trade, one match id on both sides (SecondaryExecID; in 4.2, Text).
        assert match_id(a_fill, fix_version) == match_id(b_fill, fix_version) != ""
        # Replaced, Cancelled, then a cancel of the cancelled order: OrderCancelReject (matcher).
        now = time.strftime("%Y%m%d-%H:%M:%S", time.gmtime())
        send_a("G", [(41, "sa-1"), (11, "sa-2"), *([(21, 1)] if hi else []), (55, "ACORN.LAB"), (54, 1),
                     (60, now), (38, 8), (40, 2), (44, "99.40")])
        a.wait("8", lambda m: m.get(11) == "sa-2" and m.get(150) == "5")
        send_a("F", [(41, "sa-2"), (11, "sa-3"), (55, "ACORN.LAB"), (54, 1), (60, now)])
        a.wait("8", lambda m: m.get(11) == "sa-3" and m.get(150) == "4")
        send_a("F", [(41, "sa-2"), (11, "sa-4"), (55, "ACORN.LAB"), (54, 1), (60, now)])
        a.wait("9", lambda m: m.get(11) == "sa-4")
        # Rejected by the gateway (off the tick grid) and by the matcher (a live ClOrdID again).
        send_a("D", nos("sa-5", 1, 1, "99.505", hi))
        a.wait("8", lambda m: m.get(11) == "sa-5" and m.get(150) == "8")
        send_a("D", nos("sa-6", 1, 1, "90.00", hi))
        a.wait("8", lambda m: m.get(11) == "sa-6" and m.get(150) == "0")
        send_a("D", nos("sa-6", 1, 1, "90.00", hi))
        a.wait("8", lambda m: m.get(11) == "sa-6" and m.get(150) == "8")
        # OrderCancelReject from the gateway: a replace for a symbol it does not trade.
        send_a("G", [(41, "sa-6"), (11, "sa-7"), *([(21, 1)] if hi else []), (55, "NOPE.LAB"), (54, 1),
                     (60, now), (38, 1), (40, 2), (44, "1.00")])
        a.wait("9", lambda m: m.get(11) == "sa-7")
        # The exchange's session Reject: a NewOrderSingle without TransactTime (60).
        send_a("D", [(11, "sa-8"), *([(21, 1)] if hi else []), (55, "ACORN.LAB"), (54, 1), (38, 1), (40, 2),
                     (44, "99.00")])
        a.wait("3", lambda m: m.get(371) == "60")
        # Its BusinessMessageReject: a message of the version that the exchange does not take.
        send_a(unsupported, unsupported_body)
        a.wait("j", lambda m: m.get(372) == unsupported)
        # An order status (ExecutionReport 150=I; in FIX 4.2 ExecTransType 3, ExecType the order's state).
        send_a("H", [(11, "sa-6"), (55, "ACORN.LAB"), (54, 1)])
        is_status = (lambda m: m.get(20) == "3") if hi else (lambda m: m.get(150) == "I")
        status = a.wait("8", lambda m: m.get(11) == "sa-6" and is_status(m))
        assert status[39] == "0" and status[150] == ("0" if hi else "I")
        if hi:
            # FIX 4.2 has no OrderMassCancelRequest nor SecurityListRequest: Invalid MsgType.
            send_a("q", [(11, "sa-mc"), (530, 1), (55, "BIRCH.LAB"), (60, now)])
            a.wait("3", lambda m: m.get(372) == "q" and m.get(373) == "11")
            send_a("x", [(320, "sa-sl"), (559, 4)])
            a.wait("3", lambda m: m.get(372) == "x" and m.get(373) == "11")
        else:
            # A mass cancel report (r), the security list (y).
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
        # Only once the client's engine has answered it: QuickFIX's MemoryStore finds nothing to
        # resend when the range starts at a number it never stored (the gap made here), so its
        # GapFill runs to its next number and covers an order sent in between; the exchange then
        # rightly drops that order as gap-filled (seen under load: no answer to sa-9).
        a.wait_sent("4", lambda m: m.get(123) == "Y")
        send_a("D", nos("sa-9", 1, 1, "90.00", hi))
        a.wait("8", lambda m: m.get(11) == "sa-9" and m.get(150) == "0")
        a.wait("0")  # Heartbeats (HeartBtInt 1)
        # Its Logout, when the gateway stops with the session logged on.
        stop_process(stack.gateway)
        a.wait("5")
        b.wait("5")
    for client in (a, b):
        assert client.errors == []
        assert client.session_rejects() == [], "the stock client rejected what the exchange sent"
