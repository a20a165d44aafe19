"""An independent FIX engine as the client: fixcore-engine (pure Python, not QuickFIX) logs on to the
gateway, trades, cancels, and validates every message it receives against the exchange's published
FIX 4.4 dictionary (the file the gateway derives at start-up: FIX44.xml + TrdMatchID in 35=8), with
nothing unlisted allowed, in it or in stock FIX44.xml: the proof that what the gateway sends to a
session that did not ask for TrdMatchID passes the standard dictionary."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path

import pytest
from fixcore import Application, SessionID
from fixcore.message.data_dictionary import DataDictionary, InvalidMessage
from fixcore.message.message import Message
from fixcore.session.session_settings import SessionSettings
from fixcore.transport.initiator import SocketInitiator

from tests.gateway_stack import gateway_stack, matcher_available

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not matcher_available(), reason="services.matcher is not in this checkout"),
]


class Recorder(Application):
    """Keeps every message received and every dictionary violation found in it."""

    def __init__(self, dd: DataDictionary) -> None:
        self.dd = dd
        self.messages: list[Message] = []
        self.violations: list[str] = []
        self.unlisted: dict[str, set[int]] = {}  # msg type -> body tags its definition does not list
        self.logged_on = asyncio.Event()
        self.arrived = asyncio.Event()

    def _check(self, message: Message) -> None:
        try:
            self.dd.validate(message, check_field_values=True, check_has_values=True,
                             check_user_defined=True)
        except InvalidMessage as exc:
            self.violations.append(f"{message.msg_type}: {exc}: {message!r}")
        definition = self.dd.message(message.msg_type)
        if definition is not None:
            extra = set(message.body) - definition.all_fields
            if extra:
                self.unlisted.setdefault(message.msg_type, set()).update(extra)
        self.messages.append(message)
        self.arrived.set()

    def on_logon(self, session_id: SessionID) -> None:
        self.logged_on.set()

    def from_admin(self, message: Message, session_id: SessionID) -> None:
        self._check(message)

    def from_app(self, message: Message, session_id: SessionID) -> None:
        self._check(message)

    async def wait_for(self, msg_type: str, **fields: str) -> Message:
        def match(m: Message) -> bool:
            return m.msg_type == msg_type and all(m.get(int(t[1:])) == v for t, v in fields.items())

        async def scan() -> Message:
            while True:
                for m in self.messages:
                    if match(m):
                        return m
                self.arrived.clear()
                await self.arrived.wait()

        return await asyncio.wait_for(scan(), 10)


def settings_for(comp: str, port: int, log_dir: Path, dictionary: Path) -> SessionSettings:
    return SessionSettings.from_string(f"""
[DEFAULT]
ConnectionType=initiator
HeartBtInt=30
ReconnectInterval=1
ResetOnLogon=Y
UseDataDictionary=Y
DataDictionary={dictionary}
ValidateFieldsOutOfRange=Y
ValidateFieldsHaveValues=Y
ValidateUserDefinedFields=Y
FileLogPath={log_dir}

[SESSION]
BeginString=FIX.4.4
SenderCompID={comp}
TargetCompID=FIXLAB
SocketConnectHost=127.0.0.1
SocketConnectPort={port}
""")


def now() -> str:
    return datetime.now(UTC).strftime("%Y%m%d-%H:%M:%S.%f")[:-3]


def app_message(msg_type: str, fields: list[tuple[int, object]]) -> Message:
    msg = Message()
    msg.header.set(35, msg_type)
    for tag, value in fields:
        msg.set_field(tag, str(value))
    return msg


async def trade(port: int, log_dir: Path, dictionary: Path) -> tuple[Recorder, Recorder]:
    dd = DataDictionary.from_xml(dictionary)
    buyer, seller = Recorder(dd), Recorder(dd)
    ini_b = SocketInitiator(settings_for("CLIENT13", port, log_dir, dictionary), buyer)
    ini_s = SocketInitiator(settings_for("CLIENT14", port, log_dir, dictionary), seller)
    async with ini_b, ini_s:
        await asyncio.wait_for(asyncio.gather(buyer.logged_on.wait(), seller.logged_on.wait()), 15)
        sb = next(iter(ini_b.sessions.values()))
        ss = next(iter(ini_s.sessions.values()))

        def nos(clordid: str, side: int, qty: int, price: str) -> Message:
            return app_message("D", [(11, clordid), (55, "ACORN.LAB"), (54, side), (60, now()), (38, qty),
                                     (40, 2), (44, price), (59, 0)])

        await sb.send_app(nos("fc-b1", 1, 10, "99.50"))
        await buyer.wait_for("8", t11="fc-b1", t150="0")
        await ss.send_app(nos("fc-s1", 2, 4, "99.50"))
        sell_fill = await seller.wait_for("8", t11="fc-s1", t150="F")
        buy_fill = await buyer.wait_for("8", t11="fc-b1", t150="F")
        assert sell_fill.get(527) == buy_fill.get(527)
        assert buy_fill.get(39) == "1" and buy_fill.get(151) == "6"
        await sb.send_app(app_message("F", [(41, "fc-b1"), (11, "fc-c1"), (55, "ACORN.LAB"), (54, 1),
                                            (60, now())]))
        cancelled = await buyer.wait_for("8", t11="fc-c1", t150="4")
        assert cancelled.get(14) == "4"
        # A cancel of the cancelled order: OrderCancelReject; an order refused by the gateway.
        await sb.send_app(app_message("F", [(41, "fc-b1"), (11, "fc-c2"), (55, "ACORN.LAB"), (54, 1),
                                            (60, now())]))
        await buyer.wait_for("9", t11="fc-c2")
        await sb.send_app(nos("fc-b2", 1, 1, "99.505"))
        await buyer.wait_for("8", t11="fc-b2", t150="8")
        await ss.send_app(app_message("G", [(41, "fc-s9"), (11, "fc-r1"), (55, "ACORN.LAB"), (54, 2),
                                            (60, now()), (38, 1), (40, 2), (44, "99.00")]))
        await seller.wait_for("9", t11="fc-r1")
        await ini_b.logout()
        await ini_s.logout()
    return buyer, seller


def test_fixcore_client_trades_and_every_message_it_receives_passes_the_dictionary(tmp_path: Path) -> None:
    with gateway_stack(None) as stack:
        # The exchange's dictionary as the gateway published it at start-up.
        published = stack.log_dir / "run" / "gateway" / stack.gateway_id / "FIXLAB-FIX44.xml"
        dictionary = tmp_path / "FIXLAB-FIX44.xml"
        dictionary.write_bytes(published.read_bytes())
        buyer, seller = asyncio.run(trade(stack.fix_port, tmp_path / "log", dictionary))
    for rec in (buyer, seller):
        assert rec.violations == []
        types = {m.msg_type for m in rec.messages}
        assert "8" in types
    assert {"8", "9"} <= {m.msg_type for m in buyer.messages}
    # Nothing the exchange sends is unlisted for its message type in its dictionary, nor in stock
    # FIX44.xml: the match id is in SecondaryExecID (527) on every Trade report and no other, and
    # TrdMatchID (880), which stock FIX44.xml does not list in 35=8, goes only to sessions that ask.
    stock = DataDictionary.from_xml(Path(__import__("fixcore").__file__).parent / "specs" / "FIX44.xml")
    for rec in (buyer, seller):
        assert rec.unlisted == {}
        for m in rec.messages:
            definition = stock.message(m.msg_type)
            assert definition is not None and set(m.body) <= definition.all_fields, m
        reports = [m for m in rec.messages if m.msg_type == "8"]
        assert all((m.get(150) == "F") == bool(m.get(527)) for m in reports)
        assert not any(m.get(880) for m in reports)
    assert 880 not in stock.message("8").all_fields  # what the derived dictionary adds
    assert 880 in DataDictionary.from_xml(dictionary).message("8").all_fields
    # fixcore's own session layer validated them too: it logs every Reject it would send.
    logs = [p.read_text(errors="replace") for p in (tmp_path / "log").rglob("*") if p.is_file()]
    assert logs and not any("Rejecting" in text for text in logs)
