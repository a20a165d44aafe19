"""The acceptor's dictionary with issue 14's messages: what a client sends is kept whole, what the exchange
only sends keeps the fields it writes, and every message it writes survives QuickFIX's resend (parsed with
the acceptor's dictionary, written again) as valid stock FIX 4.4."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections import Counter
from decimal import Decimal
from pathlib import Path

import pytest
import quickfix as fix

from services.gateway.inbound import Inbound
from services.gateway.marketdata import MarketData, reject
from services.gateway.outbound import Outbound
from services.gateway.securities import SecurityLists
from services.gateway.server import acceptor_types
from services.gateway.status import TradingStatus
from shared.config import Instrument
from shared.fix.codec import split_fields
from shared.fix.dictionary import (
    RECEIVED_MESSAGES,
    SENT_MESSAGES,
    WRITTEN,
    acceptor_dictionary,
    exchange_dictionary,
    installed_dictionary,
    load,
)
from shared.schema import (
    Accepted,
    Cancelled,
    CancelRejected,
    Filled,
    MassCancelReport,
    Rejected,
    Replaced,
    StatusReport,
    Triggered,
)

ACORN = Instrument("ACORN.LAB", 10_000, Decimal("0.01"))
BIRCH = Instrument("BIRCH.LAB", 2_500, Decimal("0.01"), shard="b", pro_rata=True)
TS = 1_767_225_600_123_456_789
SOH = "\x01"


@pytest.fixture(scope="module")
def paths(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("dictionaries")
    whole = exchange_dictionary(installed_dictionary().read_text(encoding="utf-8"))
    (folder / "whole.xml").write_text(whole)
    types = acceptor_types(load(str(folder / "whole.xml")))
    (folder / "acceptor.xml").write_text(acceptor_dictionary(whole, types, WRITTEN))
    return {"whole": folder / "whole.xml", "acceptor": folder / "acceptor.xml",
            "stock": installed_dictionary()}


def messages(path: Path) -> dict[str, ET.Element]:
    root = ET.parse(path).getroot()
    return {m.get("msgtype", ""): m for m in root.iter("message")}


def test_what_clients_send_is_kept_whole_and_issue_14s_messages_are_all_there(paths: dict[str, Path]) -> None:
    whole, acceptor = messages(paths["whole"]), messages(paths["acceptor"])
    assert set(acceptor) >= RECEIVED_MESSAGES | SENT_MESSAGES
    for msg_type in RECEIVED_MESSAGES:
        assert ET.tostring(acceptor[msg_type]) == ET.tostring(whole[msg_type]), msg_type


def flat(node: ET.Element) -> list[str]:
    out = []
    for child in node:
        out.append(child.get("name", ""))
        if child.tag == "group":
            out += [f"{child.get('name')}/{name}" for name in flat(child)]
    return out


def test_what_the_exchange_only_sends_keeps_the_fields_it_writes_in_place(paths: dict[str, Path]) -> None:
    acceptor = messages(paths["acceptor"])
    assert flat(acceptor["y"]) == [
        "SecurityReqID", "SecurityResponseID", "SecurityRequestResult", "TotNoRelatedSym", "LastFragment",
        "NoRelatedSym", "NoRelatedSym/Symbol", "NoRelatedSym/SecurityDesc", "NoRelatedSym/RoundLot",
        "NoRelatedSym/MinTradeVol", "NoRelatedSym/Text"]
    assert flat(acceptor["Y"]) == ["MDReqID", "MDReqRejReason", "Text"]
    # Required fields stay required; the others are optional, as in stock FIX 4.4.
    required = {f.get("name") for f in acceptor["r"] if f.get("required") == "Y"}
    assert required == {"OrderID", "MassCancelRequestType", "MassCancelResponse"}
    # A group's first field (its delimiter) comes first in each entry.
    (entries,) = [g for g in acceptor["X"] if g.tag == "group"]
    assert entries.get("name") == "NoMDEntries" and entries[0].get("name") == "MDUpdateAction"


def written_bodies() -> list[str]:
    """One of every message the exchange writes, from the code that writes it."""
    out = Outbound([ACORN, BIRCH], trd_match_sessions=frozenset({"C1"}))
    inbound = Inbound([ACORN, BIRCH], "gw1", "gw1-x")
    events = [
        Accepted("C1", "o1", "7", "ACORN.LAB", 1, 10_000, 10, 1, "E1", TS),
        Filled("C1", "o1", "7", "ACORN.LAB", 1, 10_000, 10, 9_999, 4, 4, 6, 39_996, "M1", "E2", TS),
        Cancelled("C1", "c1", "o1", "7", "ACORN.LAB", 1, 10_000, 10, 4, 39_996, "mass cancel", "E3", TS),
        Replaced("C1", "o2", "o1", "7", "ACORN.LAB", 1, 10_001, 12, 4, 8, 39_996, "E4", TS),
        Rejected("C1", "o3", "ACORN.LAB", 1, 10_000, 10, 3, "too much", "E5", TS),
        CancelRejected("C1", "c2", "o9", "NONE", 1, 1, 8, "unknown order", TS),
        StatusReport("C1", "o1", "7", "ACORN.LAB", 1, 10_000, 10, 4, 6, 39_996, 1, "", "st1", "0", TS),
        StatusReport("C1", "zz", "NONE", "ACORN.LAB", 1, 0, 0, 0, 0, 0, 8, "unknown order", "", "0", TS),
        MassCancelReport("C1", "mc1", "M1", 7, 7, 0, 3, "", 2, "", TS),
        MassCancelReport("C1", "mc2", "NONE", 1, 0, 1, 0, "NOPE", 0, "unknown symbol", TS),
    ]
    bodies = [out.report(ev) for ev in events]
    f = {"11": "q1", "55": "NOPE", "54": "1", "530": "3", "790": "s1", "38": "5", "40": "2", "44": "1"}
    bodies += [inbound.command("H", {**f, "49": "C1"}, TS).body,  # type: ignore[union-attr]
               inbound.command("q", {**f, "49": "C1"}, TS).body,  # type: ignore[union-attr]
               inbound.busy("D", f, 3, TS).body, inbound.busy("F", f, 3, TS).body]
    lists = SecurityLists([ACORN, BIRCH], "gw1-SL")
    bodies += [lists.answer({"320": "a", "559": "4"}), lists.answer({"320": "b", "559": "0", "55": "NOPE"})]
    md = MarketData([ACORN, BIRCH])
    md.apply_image("ACORN.LAB", [(9_950, 10, 2), (9_940, 5, 1)], [(10_050, 7, 1)])
    request = SOH.join(["262=md1", "263=1", "264=0", "265=1", "267=3", "269=0", "269=1", "269=2", "146=1",
                        "55=ACORN.LAB", ""])
    bodies += [body for _session, body in md.request("C1", request)]
    md.apply_update("ACORN.LAB", [(1, 9_950, 0, 0), (2, 10_040, 3, 1)])
    md.apply_trade("ACORN.LAB", 10_050, 2)
    bodies += [body for _session, body in md.flush()]
    # Issue 31: a stop's reports (40/99, Restated when triggered), trading status (f, h).
    bodies += [out.report(Triggered("C1", "s1", "8", "ACORN.LAB", 2, 0, 5, 3, 9_850, "E6", TS)),
               out.report(Accepted("C1", "s2", "9", "ACORN.LAB", 1, 10_100, 5, 0, "E7", TS, 4, 10_050))]
    status = TradingStatus([ACORN, BIRCH])
    bodies += [b for _s, b in status.request("C1", "e", {"324": "ss1", "263": "1"}, TS)]
    bodies += [b for _s, b in status.request("C1", "g", {"335": "ts1", "263": "1"}, TS)]
    bodies += [b for _s, b in status.phase_changed("ACORN.LAB", 4, 2, "halt", TS)]
    bodies += [reject("md9", "0", "unknown symbol NOPE"),
               "35=j\x0145=2\x01372=R\x01380=3\x0158=Unsupported Message Type\x01"]  # QuickFIX's
    return bodies


def test_every_message_the_exchange_writes_survives_a_resend_as_stock_fix44(paths: dict[str, Path]) -> None:
    bodies = written_bodies()
    assert {split_fields(b)["35"] for b in bodies} == SENT_MESSAGES
    acceptor = fix.DataDictionary(str(paths["acceptor"]))
    stock = fix.DataDictionary(str(paths["stock"]))
    header = "8=FIX.4.4\x019=0\x01"
    for body in bodies:
        msg_type = split_fields(body)["35"]
        raw = (header + body.replace("35=" + msg_type + SOH, f"35={msg_type}\x0134=2\x0149=FIXLAB"
                                     "\x0152=20260101-00:00:00.000\x0156=C1\x01", 1) + "10=000\x01")
        # What a resend does: parse the stored text with the session's (the acceptor's) dictionary.
        again = fix.Message(fix.Message(raw, acceptor, False).toString(), stock, False)
        if msg_type != "8" or "880=" not in body:  # TrdMatchID: the exchange's addition (FIXLAB-FIX44.xml)
            stock.validate(again)
        assert Counter(again.toString().split(SOH)[2:-2]) == Counter(raw.split(SOH)[2:-2]), body
