"""The client's core reading a call's indicative market data (issue 31) in FIX 4.4, 4.2 and 5.0 SP2,
on byte literals of what the gateway sends each version (docs/trading-day.md): the uncross price as
269=4/5 (5.0 SP2: Q) with its volume and TradingSessionSubID (625; none in 4.2), the imbalance as
269=A with TradeCondition 277=P/Q (none in 4.2); and the auction's trades marked on the tape."""

from __future__ import annotations

from typing import Any

import pytest

from services.client.commands import parse
from services.client.core import Client, Print
from services.client.session import LOGGED_ON, Record
from shared.fix.dictionary import load_version
from shared.fix.mdbook import Indicative
from shared.fix.versions import FixVersion, version
from tests.gateway_stack import frame

BOOK = [(269, "0"), (270, "101.00"), (271, 10), (346, 1), (269, "1"), (270, "100.00"), (271, 4), (346, 1)]


class FakeSession:
    """What Client asks of a ClientSession to subscribe; sent messages are kept."""

    def __init__(self, fix_version: FixVersion) -> None:
        self.status = LOGGED_ON
        self.text = ""
        self.fix_version = fix_version
        self.sent: list[list[tuple[int, Any]]] = []

    @property
    def logged_on(self) -> bool:
        return True

    def send(self, fields: list[tuple[int, Any]]) -> None:
        self.sent.append(list(fields))


class Wire:
    """A Client of one version and the exchange's messages to it, numbered in order."""

    def __init__(self, name: str) -> None:
        self.version = version(name)
        self.session = FakeSession(self.version)
        self.client = Client(self.session, load_version(name), prefix="T-")  # type: ignore[arg-type]
        self.n = 1
        self.req_id = ""

    def subscribe(self) -> list[str]:
        """``book ACORN.LAB``: the MDEntryTypes its V asks for."""
        cmd = parse("book ACORN.LAB")
        assert cmd is not None
        self.client.execute(cmd)
        fields = dict(self.session.sent[-1])
        self.req_id = str(fields[262])
        return [str(entry[0][1]) for entry in fields[267]]

    def receive(self, msg_type: str, body: list[tuple[int, object]]) -> None:
        self.n += 1
        head: list[tuple[int, object]] = [(35, msg_type), (49, "FIXLAB"), (56, "CLIENT01"), (34, self.n),
                                          (52, "20261207-10:00:00.000")]
        if self.version.fixt:
            head.append((1128, "9"))
        raw = frame(head + body, self.version.begin_string)
        d = self.client.decode(Record(self.n, "exchange", raw, False, 1_000 * self.n))
        assert d.parsed.problems == [], d.parsed.problems

    def w(self, entries: list[tuple[int, object]]) -> None:
        body: list[tuple[int, object]] = [(262, self.req_id), (55, "ACORN.LAB")]
        if self.version.fixt:
            body.append((779, "20261207-10:00:00.000"))  # LastUpdateTime, which 5.0 SP2 requires in a W
        self.receive("W", [*body, (268, sum(1 for t, _ in entries if t == 269)), *entries])

    def x(self, entries: list[tuple[int, object]]) -> None:
        self.receive("X", [(262, self.req_id), (268, sum(1 for t, _ in entries if t == 279)), *entries])

    def status(self, trading_status: str, sub_id: str) -> None:
        """A SecurityStatus, as the gateway says it in this version (FIX 4.2: no 625)."""
        body: list[tuple[int, object]] = [(324, "st-ACORN.LAB"), (55, "ACORN.LAB"), (326, trading_status)]
        if self.version.name != "4.2":
            body += [(625, sub_id)]
        self.receive("f", body)

    def tape(self) -> list[tuple[str, str, bool]]:
        return [(t.price, t.qty, t.auction) for t in self.client.tape]


# Per version, as the gateway sends them: the price's MDEntryType, whether 625 and A come at all.
PRICE = {"4.4": "4", "4.2": "4", "5.0SP2": "Q"}
ASKS = {"4.4": ["0", "1", "2", "4", "A"], "4.2": ["0", "1", "2", "4"], "5.0SP2": ["0", "1", "2", "Q", "A"]}
OPENING_SHOWN = {
    "4.4": "  indicative (opening auction): 101.00 for 4, imbalance 6 more buyers",
    "4.2": "  indicative (opening auction): 101.00 for 4",  # FIX 4.2: no Imbalance, no 625 (4 says opening)
    "5.0SP2": "  indicative (opening auction): 101.00 for 4, imbalance 6 more buyers",
}


def indicative(name: str, action: str | None, price: str, volume: int, imbalance: int, more: str,
               sub_id: str = "2", kind: str = "") -> list[tuple[int, object]]:
    """A call's indicative entries in version ``name``'s words (action None: a W's)."""
    kind = kind or PRICE[name]
    has_625 = name != "4.2"
    head = [] if action is None else [(279, action)]
    sym: list[tuple[int, object]] = [] if action is None else [(55, "ACORN.LAB")]
    out: list[tuple[int, object]] = [*head, (269, kind), *sym, (270, price), (271, volume)]
    out += [(625, sub_id)] if has_625 else []
    if name != "4.2":
        out += [*head, (269, "A"), *sym, (270, price), (271, imbalance), (625, sub_id)]
        out += [(277, more)] if more else []
    return out


def deletes(name: str, price: str, kind: str = "") -> list[tuple[int, object]]:
    out: list[tuple[int, object]] = [(279, "2"), (269, kind or PRICE[name]), (55, "ACORN.LAB"), (270, price)]
    if name != "4.2":
        out += [(279, "2"), (269, "A"), (55, "ACORN.LAB"), (270, price)]
    return out


def trade(price: str, qty: int) -> list[tuple[int, object]]:
    return [(279, "0"), (269, "2"), (55, "ACORN.LAB"), (270, price), (271, qty)]


@pytest.mark.parametrize("name", ["4.4", "4.2", "5.0SP2"])
def test_a_call_its_indicative_and_the_auction_trade_in_each_version(name: str) -> None:
    wire = Wire(name)
    assert wire.subscribe() == ASKS[name]  # what the version's dictionary defines
    # The W of a book in its opening call (the bid of 10 at 101.00 crosses the offer of 4 at 100.00).
    wire.status("21" if name != "4.2" else "5", "2")
    wire.w(BOOK + indicative(name, None, "101.00", 4, 6, "P"))
    lines = wire.client.book_lines("ACORN.LAB")
    assert lines[1] == OPENING_SHOWN[name]
    assert "101.00" in lines[2] and "100.00" in lines[2]  # the levels below it
    # The uncross moves: an X changes the entries (a bigger offer: 10 execute, balanced).
    wire.x([(279, "1"), (269, "1"), (55, "ACORN.LAB"), (270, "100.00"), (271, 10), (346, 2),
            *indicative(name, "1", "101.00", 10, 0, "")])
    shown = wire.client.books.indicative("ACORN.LAB")
    assert shown == Indicative("101.00", 10, "opening", None if name == "4.2" else 0, "")
    assert wire.client.book_lines("ACORN.LAB")[1].endswith("101.00 for 10" if name == "4.2" else
                                                           "101.00 for 10, balanced")
    assert wire.tape() == []
    # The open: the SecurityStatus first, then one X with the auction's trades and the deletes.
    wire.status("17", "3")
    wire.x([*trade("101.00", 6), *trade("101.00", 4),
            (279, "2"), (269, "0"), (55, "ACORN.LAB"), (270, "101.00"),
            (279, "2"), (269, "1"), (55, "ACORN.LAB"), (270, "100.00"),
            *deletes(name, "101.00")])
    assert wire.client.books.indicative("ACORN.LAB") is None
    assert all("indicative" not in line for line in wire.client.book_lines("ACORN.LAB"))
    assert wire.tape() == [("101.00", "6", True), ("101.00", "4", True)]
    # Continuous trading after it: an ordinary trade.
    wire.x([(279, "0"), (269, "1"), (55, "ACORN.LAB"), (270, "101.50"), (271, 1), (346, 1)])
    wire.x([*trade("101.50", 1), (279, "2"), (269, "1"), (55, "ACORN.LAB"), (270, "101.50")])
    assert wire.tape()[-1] == ("101.50", "1", False)


@pytest.mark.parametrize("name", ["4.4", "4.2", "5.0SP2"])
def test_the_closing_call_and_a_halts_reopening_auction(name: str) -> None:
    wire = Wire(name)
    wire.subscribe()
    closing = "5" if name != "5.0SP2" else "Q"  # 5.0 SP2 tells the auction by 625 only
    wire.w(BOOK + indicative(name, None, "100.50", 4, 2, "Q", sub_id="4", kind=closing))
    assert wire.client.books.indicative("ACORN.LAB") == Indicative(
        "100.50", 4, "closing", None if name == "4.2" else 2, "" if name == "4.2" else "sellers")
    wire.x(deletes(name, "100.50", kind=closing))
    assert wire.client.books.indicative("ACORN.LAB") is None
    wire.w(BOOK + indicative(name, None, "100.00", 4, 0, "", sub_id="9"))
    assert wire.client.books.indicative("ACORN.LAB") == Indicative(
        "100.00", 4, "opening" if name == "4.2" else "re-opening", None if name == "4.2" else 0, "")


def test_only_the_trades_of_the_message_that_ends_the_call_at_its_price_are_the_auctions() -> None:
    wire = Wire("4.4")
    wire.subscribe()
    wire.w(BOOK + indicative("4.4", None, "101.00", 4, 6, "P"))
    # The book stops crossing during the call: the entries go, no trade (a call has none).
    wire.x([(279, "2"), (269, "1"), (55, "ACORN.LAB"), (270, "100.00"), *deletes("4.4", "101.00")])
    assert wire.client.books.indicative("ACORN.LAB") is None and wire.tape() == []
    wire.x([(279, "0"), (269, "1"), (55, "ACORN.LAB"), (270, "100.00"), (271, 4), (346, 1),
            *indicative("4.4", "0", "101.00", 4, 6, "P")])
    # The open, and in the same conflated X a trade of continuous trading at another price.
    wire.x([*trade("101.00", 4), *trade("101.20", 2), *deletes("4.4", "101.00")])
    assert wire.tape() == [("101.00", "4", True), ("101.20", "2", False)]
    # The next message's trades are continuous trading's.
    wire.x(trade("101.00", 1))
    assert wire.tape()[-1] == ("101.00", "1", False)


def test_an_unsubscribe_forgets_the_indicative_and_the_page_asks_for_no_indicative() -> None:
    from shared.fix.orders import MD_ENTRY_TYPES, LabOrders
    from shared.schema import LabCommand

    wire = Wire("4.4")
    wire.subscribe()
    wire.w(BOOK + indicative("4.4", None, "101.00", 4, 6, "P"))
    wire.client.books.forget("ACORN.LAB")
    assert wire.client.books.indicative("ACORN.LAB") is None
    page = LabOrders("L-", version("4.4"))
    _, fields = page.md_subscribe(LabCommand("", "md_subscribe", symbol="ACORN.LAB"))
    assert [e[0][1] for e in dict(fields)[267]] == list(MD_ENTRY_TYPES)
    assert Print("ACORN.LAB", "1", "1", 0).auction is False
