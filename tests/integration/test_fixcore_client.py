"""An independent FIX engine as the client: fixcore-engine (pure Python, not QuickFIX) logs on to the
gateway, trades, cancels, and validates every message it receives against the exchange's published
FIX 4.4 dictionary (the file the gateway derives at start-up: FIX44.xml + TrdMatchID in 35=8), with
nothing unlisted allowed, in it or in stock FIX44.xml: the proof that what the gateway sends to a
session that did not ask for TrdMatchID passes the standard dictionary. The same runs for FIX 4.2
(fixcore with FIX42.xml) and FIXT.1.1 / FIX 5.0 SP2 (FIXT11.xml + FIX50SP2.xml), each validating what
it receives with its version's stock dictionary (issue 25)."""

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
    """Keeps every message received and every dictionary violation found in it (``admin``: the
    session level's dictionary, a FIXT session's own)."""

    def __init__(self, dd: DataDictionary, admin: DataDictionary | None = None) -> None:
        self.dd = dd
        self.admin = admin or dd
        self.messages: list[Message] = []
        self.violations: list[str] = []
        self.unlisted: dict[str, set[int]] = {}  # msg type -> body tags its definition does not list
        self.logged_on = asyncio.Event()
        self.arrived = asyncio.Event()

    def _check(self, message: Message, dd: DataDictionary | None = None) -> None:
        dd = dd or self.dd
        try:
            dd.validate(message, check_field_values=True, check_has_values=True, check_user_defined=True)
        except InvalidMessage as exc:
            self.violations.append(f"{message.msg_type}: {exc}: {message!r}")
        definition = dd.message(message.msg_type)
        if definition is not None:
            extra = set(message.body) - definition.all_fields
            if extra:
                self.unlisted.setdefault(message.msg_type, set()).update(extra)
        self.messages.append(message)
        self.arrived.set()

    def on_logon(self, session_id: SessionID) -> None:
        self.logged_on.set()

    def from_admin(self, message: Message, session_id: SessionID) -> None:
        self._check(message, self.admin)

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


SPECS = Path(__import__("fixcore").__file__).parent / "specs"
# Per version: the two CompIDs, the buyer's and the seller's fill ExecType, whether D and G carry
# HandlInst (FIX 4.2 requires it).
VERSIONS = {
    "4.4": (("CLIENT13", "CLIENT14"), ("F", "F"), False),
    "4.2": (("CLIENT42-06", "CLIENT42-07"), ("1", "2"), True),
    "5.0SP2": (("CLIENT50-06", "CLIENT50-07"), ("F", "F"), False),
}


def settings_for(comp: str, port: int, log_dir: Path, dictionary: Path,
                 fix_version: str = "4.4") -> SessionSettings:
    if fix_version == "5.0SP2":
        begin, dictionaries = "FIXT.1.1", (f"TransportDataDictionary={SPECS / 'FIXT11.xml'}\n"
                                           f"AppDataDictionary={dictionary}\nDefaultApplVerID=FIX.5.0SP2")
    else:
        begin, dictionaries = f"FIX.{fix_version}", f"DataDictionary={dictionary}"
    return SessionSettings.from_string(f"""
[DEFAULT]
ConnectionType=initiator
HeartBtInt=30
ReconnectInterval=1
ResetOnLogon=Y
UseDataDictionary=Y
{dictionaries}
ValidateFieldsOutOfRange=Y
ValidateFieldsHaveValues=Y
ValidateUserDefinedFields=Y
FileLogPath={log_dir}

[SESSION]
BeginString={begin}
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


async def trade(port: int, log_dir: Path, dictionary: Path,
                fix_version: str = "4.4") -> tuple[Recorder, Recorder]:
    (buyer_comp, seller_comp), (buy_type, sell_type), handl_inst = VERSIONS[fix_version]
    hi: list[tuple[int, object]] = [(21, 1)] if handl_inst else []
    dd = DataDictionary.from_xml(dictionary)
    admin = DataDictionary.from_xml(SPECS / "FIXT11.xml") if fix_version == "5.0SP2" else None
    buyer, seller = Recorder(dd, admin), Recorder(dd, admin)
    ini_b = SocketInitiator(settings_for(buyer_comp, port, log_dir, dictionary, fix_version), buyer)
    ini_s = SocketInitiator(settings_for(seller_comp, port, log_dir, dictionary, fix_version), seller)
    async with ini_b, ini_s:
        await asyncio.wait_for(asyncio.gather(buyer.logged_on.wait(), seller.logged_on.wait()), 15)
        sb = next(iter(ini_b.sessions.values()))
        ss = next(iter(ini_s.sessions.values()))

        def nos(clordid: str, side: int, qty: int, price: str) -> Message:
            return app_message("D", [(11, clordid), *hi, (55, "ACORN.LAB"), (54, side), (60, now()),
                                     (38, qty), (40, 2), (44, price), (59, 0)])

        await sb.send_app(nos("fc-b1", 1, 10, "99.50"))
        await buyer.wait_for("8", t11="fc-b1", t150="0")
        await ss.send_app(nos("fc-s1", 2, 4, "99.50"))
        sell_fill = await seller.wait_for("8", t11="fc-s1", t150=sell_type)
        buy_fill = await buyer.wait_for("8", t11="fc-b1", t150=buy_type)
        if fix_version == "4.2":  # no SecondaryExecID in FIX 4.2: the match id is in Text
            assert sell_fill.get(58) == buy_fill.get(58) and str(buy_fill.get(58)).startswith("TrdMatchID=")
        else:
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
        await ss.send_app(app_message("G", [(41, "fc-s9"), (11, "fc-r1"), *hi, (55, "ACORN.LAB"), (54, 2),
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


@pytest.mark.parametrize("fix_version", ["4.2", "5.0SP2"])
def test_fixcore_client_of_another_version_trades_and_passes_its_stock_dictionary(tmp_path: Path,
                                                                                 fix_version: str) -> None:
    dictionary = SPECS / ("FIX42.xml" if fix_version == "4.2" else "FIX50SP2.xml")
    with gateway_stack(None) as stack:
        buyer, seller = asyncio.run(trade(stack.fix_port, tmp_path / "log", dictionary, fix_version))
    for rec in (buyer, seller):
        assert rec.violations == [] and rec.unlisted == {}
    assert {"8", "9"} <= {m.msg_type for m in buyer.messages}
    logs = [p.read_text(errors="replace") for p in (tmp_path / "log").rglob("*") if p.is_file()]
    assert logs and not any("Rejecting" in text for text in logs)
    # fixcore's own session layer validated them too: it logs every Reject it would send.
    logs = [p.read_text(errors="replace") for p in (tmp_path / "log").rglob("*") if p.is_file()]
    assert logs and not any("Rejecting" in text for text in logs)
