"""A newcomer's FIX client: QuickFIX with the stock FIX44.xml the quickfix package installs and strict
validation. Every kind of message the exchange sends reaches its application, and its engine never
answers one with a session Reject (35=3): an exchange sends, by default, only what the standard
dictionary lets its counterparties receive.

Covered: ExecutionReport New, PartiallyFilled, Filled (Trade), Replaced, Cancelled, Rejected by the
gateway and by the matcher; OrderCancelReject from both; the exchange's session Reject, its
BusinessMessageReject, its ResendRequest, Heartbeats, and its Logout when the gateway stops.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import quickfix as fix

from shared.fix.dictionary import installed_dictionary
from tests.gateway_stack import Stack, gateway_stack, matcher_available, stop_process
from tests.helpers import eventually

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not matcher_available(), reason="services.matcher is not in this checkout"),
]

SOH = "\x01"


def fields_of(raw: str) -> dict[int, str]:
    out: dict[int, str] = {}
    for item in raw.split(SOH):
        tag, _, value = item.partition("=")
        if tag.isdigit():
            out[int(tag)] = value
    return out


class StockClient(fix.Application):
    """Records what its engine received (admin and app) and every admin message it sent."""

    def __init__(self) -> None:
        super().__init__()
        self.logged_on = threading.Event()
        self.received: list[dict[int, str]] = []
        self.sent_admin: list[dict[int, str]] = []
        self.errors: list[str] = []
        self.lock = threading.Lock()

    def onCreate(self, sid: fix.SessionID) -> None: ...
    def onLogout(self, sid: fix.SessionID) -> None: ...
    def toApp(self, msg: fix.Message, sid: fix.SessionID) -> None: ...

    def onLogon(self, sid: fix.SessionID) -> None:
        self.logged_on.set()

    def _keep(self, into: list[dict[int, str]], msg: fix.Message) -> None:
        try:
            with self.lock:
                into.append(fields_of(msg.toString()))
        except Exception as exc:  # an exception escaping a callback would end the test process
            self.errors.append(repr(exc))

    def toAdmin(self, msg: fix.Message, sid: fix.SessionID) -> None:
        self._keep(self.sent_admin, msg)

    def fromAdmin(self, msg: fix.Message, sid: fix.SessionID) -> None:
        self._keep(self.received, msg)

    def fromApp(self, msg: fix.Message, sid: fix.SessionID) -> None:
        self._keep(self.received, msg)

    def find(self, msg_type: str, where: Callable[[dict[int, str]], bool] = lambda m: True
             ) -> dict[int, str] | None:
        with self.lock:
            return next((m for m in self.received if m.get(35) == msg_type and where(m)), None)

    def wait(self, msg_type: str, where: Callable[[dict[int, str]], bool] = lambda m: True,
             timeout_s: float = 10.0) -> dict[int, str]:
        return eventually(lambda: self.find(msg_type, where), timeout=timeout_s, what=f"35={msg_type}")

    def session_rejects(self) -> list[dict[int, str]]:
        with self.lock:
            return [m for m in self.sent_admin if m.get(35) == "3"]


def stock_settings(path: Path, port: int, comps: list[str]) -> fix.SessionSettings:
    """QuickFIX's defaults, plus every validation switch on, with the installed FIX44.xml."""
    sessions = "".join(f"\n[SESSION]\nBeginString=FIX.4.4\nSenderCompID={c}\nTargetCompID=FIXLAB\n"
                       for c in comps)
    path.write_text(
        f"[DEFAULT]\nConnectionType=initiator\nHeartBtInt=1\nReconnectInterval=60\n"
        f"SocketConnectHost=127.0.0.1\nSocketConnectPort={port}\nStartTime=00:00:00\nEndTime=00:00:00\n"
        f"ResetOnLogon=Y\nUseDataDictionary=Y\nDataDictionary={installed_dictionary()}\n"
        "ValidateUserDefinedFields=Y\nValidateFieldsOutOfOrder=Y\nValidateFieldsHaveValues=Y\n"
        "AllowUnknownMsgFields=N\nCheckLatency=N\n" + sessions)
    return fix.SessionSettings(str(path))


def raw(comp: str, body: list[tuple[int, object]], msg_type: str) -> fix.Message:
    now = time.strftime("%Y%m%d-%H:%M:%S", time.gmtime())
    text = f"8=FIX.4.4{SOH}9=0{SOH}35={msg_type}{SOH}49={comp}{SOH}56=FIXLAB{SOH}52={now}{SOH}"
    text += "".join(f"{t}={v}{SOH}" for t, v in body) + f"10=000{SOH}"
    return fix.Message(text, False)


def nos(clordid: str, side: int, qty: int, price: str) -> list[tuple[int, object]]:
    return [(11, clordid), (55, "ACORN.LAB"), (54, side),
            (60, time.strftime("%Y%m%d-%H:%M:%S", time.gmtime())), (38, qty), (40, 2), (44, price),
            (59, 0)]


@pytest.fixture
def stack() -> Iterator[Stack]:
    with gateway_stack(None) as s:
        yield s


def test_a_strict_stock_client_takes_every_message_the_exchange_sends(stack: Stack, tmp_path: Path) -> None:
    a_comp, b_comp = "CLIENT09", "CLIENT10"
    a, b = StockClient(), StockClient()
    ini_a = fix.SocketInitiator(a, fix.MemoryStoreFactory(),
                                stock_settings(tmp_path / "a.cfg", stack.fix_port, [a_comp]))
    ini_b = fix.SocketInitiator(b, fix.MemoryStoreFactory(),
                                stock_settings(tmp_path / "b.cfg", stack.fix_port, [b_comp]))
    ini_a.start()
    ini_b.start()
    try:
        assert a.logged_on.wait(15) and b.logged_on.wait(15)
        a_sid = fix.SessionID("FIX.4.4", a_comp, "FIXLAB")

        def send_a(msg_type: str, body: list[tuple[int, object]]) -> None:
            assert fix.Session.sendToTarget(raw(a_comp, body, msg_type), a_sid)

        # New, then a trade: PartiallyFilled for the resting buyer, Filled for the seller.
        send_a("D", nos("sa-1", 1, 10, "99.50"))
        a.wait("8", lambda m: m.get(11) == "sa-1" and m.get(150) == "0")
        b_sid = fix.SessionID("FIX.4.4", b_comp, "FIXLAB")
        assert fix.Session.sendToTarget(raw(b_comp, nos("sb-1", 2, 4, "99.50"), "D"), b_sid)
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
        # Its ResendRequest: a gap in what the client sends (its engine answers with a GapFill), and
        # the session goes on.
        session = fix.Session.lookupSession(a_sid)
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
    finally:
        ini_a.stop()
        ini_b.stop()
    for client in (a, b):
        assert client.errors == []
        assert client.session_rejects() == [], "the stock client rejected what the exchange sent"
