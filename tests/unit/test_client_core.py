"""The client's core (services/client/core.py) on byte literals and a hand-written session fake."""

from __future__ import annotations

from typing import Any

import pytest

from services.client.commands import CommandError, parse
from services.client.core import Client, Decoded, Phase, clordid_prefix, phase_of
from services.client.session import LOGGED_ON, LOGGED_OUT, Record
from shared.fix import dictionary
from shared.fix.versions import DEFAULT
from tests.gateway_stack import frame


class FakeSession:
    """What Client asks of a ClientSession; sent messages are kept."""

    def __init__(self) -> None:
        self.status = LOGGED_ON
        self.text = ""
        self.sent: list[list[tuple[int, Any]]] = []
        self.dropped = self.silent = False
        self.fix_version = DEFAULT

    @property
    def logged_on(self) -> bool:
        return self.status == LOGGED_ON

    def send(self, fields: list[tuple[int, Any]]) -> None:
        self.sent.append(list(fields))

    def seqs(self) -> tuple[int, int]:
        return 7, 5

    def exchange_seqs(self) -> tuple[int, int]:
        return 5, 7

    def drop_next(self) -> None:
        self.dropped = True

    def go_silent(self) -> None:
        self.silent = True

    def talk(self) -> None:
        self.silent = False


def msg(source: str, n: int, msg_type: str, body: list[tuple[int, object]], seq: int = 2) -> Record:
    raw = frame([(35, msg_type), (49, "FIXLAB"), (56, "CLIENT01"), (34, seq), (52, "20261205-10:00:00.000"),
                 *body])
    return Record(n, source, raw, False, 1_000)


@pytest.fixture
def client() -> tuple[Client, FakeSession]:
    fake = FakeSession()
    return Client(fake, dictionary.load(), prefix="T-"), fake  # type: ignore[arg-type]


def run(c: Client, line: str) -> list[str]:
    cmd = parse(line)
    assert cmd is not None
    return c.execute(cmd)


def er(clordid: str, exec_type: str, status: str, **more: object) -> list[tuple[int, object]]:
    body: list[tuple[int, object]] = [(6, "0"), (11, clordid), (14, more.get("cum", 0)), (17, "E1"),
                                      (37, "O1"), (38, 10), (39, status), (44, "99.90"), (54, 1),
                                      (55, "ACORN.LAB"), (150, exec_type), (151, more.get("leaves", 10))]
    if exec_type == "F":
        body += [(31, "99.90"), (32, more.get("last", 4))]
    return body


def test_an_order_its_report_and_a_fill(client: tuple[Client, FakeSession]) -> None:
    c, fake = client
    assert run(c, "buy ACORN.LAB 99.90 10") == []
    fields = dict(fake.sent[0])
    assert fields[35] == "D" and fields[11] == "T-1" and fields[44] == "99.90" and fields[38] == "10"
    assert fields[59] == "0" and fields[40] == "2" and fields[54] == "1"
    d = c.decode(msg("exchange", 2, "8", er("T-1", "0", "0")))
    assert d.text.startswith("<- ExecutionReport 35=8 #2")
    assert "ExecType(150)=0 (New)" in d.text and "OrdStatus(39)=0 (New)" in d.text
    assert [o.status for o in c.open_orders()] == ["0"]
    c.decode(msg("exchange", 3, "8", er("T-1", "F", "1", cum=4, leaves=6), seq=3))
    (o,) = c.open_orders()
    assert (o.cum_qty, o.leaves_qty) == (4, 6)
    assert c.order_lines() == ["T-1  buy ACORN.LAB 10 @ 99.90  filled 4, open 6  Partially filled"]
    assert c.fill_lines()[0].startswith("T-1  buy 4 ACORN.LAB @ 99.90")
    # cancel, status and replace of that order, by its number or ClOrdID
    run(c, "cancel 1")
    assert dict(fake.sent[-1])[35] == "F" and dict(fake.sent[-1])[41] == "T-1"
    run(c, "status T-1")
    assert dict(fake.sent[-1])[35] == "H"
    run(c, "replace 1 100.00 -")
    assert dict(fake.sent[-1])[44] == "100.00" and dict(fake.sent[-1])[38] == "10"


def test_unknown_order_and_not_logged_on_are_clear_lines(client: tuple[Client, FakeSession]) -> None:
    c, fake = client
    with pytest.raises(CommandError, match="unknown order '9'"):
        run(c, "cancel 9")
    fake.status, fake.text = LOGGED_OUT, "the exchange logged the session out"
    with pytest.raises(CommandError, match=r"not logged on .the exchange logged the session out"):
        run(c, "buy ACORN.LAB 1 1")
    assert run(c, "seq") == ["client: next to send 7, next expected 5 | "
                             "exchange: next to send 5, next expected 7"]
    run(c, "drop")
    run(c, "silent")
    assert fake.dropped and fake.silent


def test_books_and_tape_from_market_data(client: tuple[Client, FakeSession]) -> None:
    c, fake = client
    run(c, "book ACORN.LAB")
    v = fake.sent[-1]
    assert v[0] == (35, "V")
    req = dict(v)[262]
    assert isinstance(req, str)
    # what the engine put on the wire (groups flattened, as it sends them)
    c.decode(msg("client", 1, "V", [(262, req), (263, 1), (264, 0), (265, 1), (267, 1), (269, 0), (146, 1),
                                    (55, "ACORN.LAB")]))
    c.decode(msg("exchange", 2, "W", [(55, "ACORN.LAB"), (262, req), (268, 2), (269, 0), (270, "99.90"),
                                      (271, 10), (346, 1), (269, 1), (270, "100.10"), (271, 5), (346, 2)]))
    assert c.subscribed() == ["ACORN.LAB"]
    book = c.book_lines("ACORN.LAB")
    assert "99.90" in book[1] and "100.10" in book[1]
    c.decode(msg("exchange", 3, "X", [(262, req), (268, 2), (279, 0), (269, 2), (55, "ACORN.LAB"),
                                      (270, "99.90"), (271, 3), (279, 1), (269, 0), (55, "ACORN.LAB"),
                                      (270, "99.90"), (271, 7), (346, 1)], seq=3))
    assert [(t.symbol, t.price, t.qty) for t in c.tape] == [("ACORN.LAB", "99.90", "3")]
    assert "7 (1)" in c.book_lines("ACORN.LAB")[1]
    detail = c.detail_lines(3)
    assert detail[0] == "#3 <- MarketDataIncrementalRefresh 35=X"
    assert "  NoMDEntries(268)=2" in detail
    assert "    entry 1 of 2:" in detail and "      MDEntryType(269)=2 (Trade)" in detail


def test_session_messages_and_withheld_ones(client: tuple[Client, FakeSession]) -> None:
    c, _ = client
    seen: list[Decoded] = []
    assert c.follow(seen.append) == []
    rec = msg("client", 1, "0", [])
    c.on_record(Record(1, "client", rec.raw, True, 1))
    assert seen[0].parsed.category == "session"
    assert seen[0].text == "-> Heartbeat 35=0 #2 [withheld by the tap]"
    with pytest.raises(CommandError, match="no wire message 99"):
        c.detail_lines(99)


def test_clordid_prefix_differs_per_second() -> None:
    assert clordid_prefix(0) == "T0-"
    assert clordid_prefix(36) == "T10-"
    assert clordid_prefix(1_764_900_000) != clordid_prefix(1_764_900_001)


def test_the_client_and_the_page_name_order_states_alike(client: tuple[Client, FakeSession]) -> None:
    from services.web import views

    c, _ = client
    assert {k: c.status_name(k) for k in views.ORD_STATUS} == views.ORD_STATUS
    d = dictionary.load()
    # the page's words are the dictionary's wherever FIX 4.4 lists the value
    assert all(d.meaning(39, k) in ("", v) for k, v in views.ORD_STATUS.items())


def test_wrap_keeps_every_character_and_the_width() -> None:
    from services.client.tui import INDENT, wrap

    text = "-> NewOrderSingle 35=D #2  ClOrdID(11)=T-1 OrderQty(38)=10 OrdType(40)=2 (Limit) Price(44)=99.90"
    for width in (30, 45, 200):
        rows = wrap(text, width)
        assert all(len(r) <= width for r in rows)
        assert all(r.startswith(INDENT) for r in rows[1:])
        assert " ".join(" ".join(rows).split()) == " ".join(text.split())
    assert wrap("x" * 50, 20) == ["x" * 20, INDENT + "x" * 12, INDENT + "x" * 12, INDENT + "x" * 6]
    assert wrap("", 20) == [""]


def test_the_new_order_types_and_status_of_a_symbol_on_the_wire(client: tuple[Client, FakeSession]) -> None:
    c, fake = client
    run(c, "buy ACORN.LAB mkt 10")
    run(c, "sell ACORN.LAB stop 98.50 10")
    run(c, "buy ACORN.LAB stoplimit 101.00 101.50 5")
    sent = [dict(m) for m in fake.sent]
    assert [(m[40], m.get(44), m.get(99)) for m in sent] == [("1", None, None), ("3", None, "98.50"),
                                                            ("4", "101.50", "101.00")]
    run(c, "status ACORN.LAB")
    status = dict(fake.sent[-1])
    assert (status[35], status[55], status[263]) == ("e", "ACORN.LAB", "1")  # a string, as set_fields takes


@pytest.mark.parametrize(("fields", "label"), [
    ({326: "21", 625: "2"}, "Pre-open call"), ({326: "21", 625: "4"}, "Pre-close call"),
    ({326: "17", 625: "3"}, "Continuous"), ({326: "3", 625: "3"}, "Continuous"),
    ({326: "2", 625: "9"}, "Halted"), ({326: "18", 625: "5"}, "Closed"),
    ({326: "5"}, "Call"), ({326: "2"}, "Halted"), ({326: "17"}, "Continuous"),  # FIX 4.2: no 625, no 21
    ({326: "99"}, "SecurityTradingStatus 99"),
])
def test_the_phase_a_security_status_tells(fields: dict[int, str], label: str) -> None:
    assert phase_of({55: "ACORN.LAB", **fields}) == Phase("ACORN.LAB", label, "")


def test_the_book_says_the_phase_of_its_last_security_status(client: tuple[Client, FakeSession]) -> None:
    c, _ = client
    assert c.book_lines("ACORN.LAB") == ["ACORN.LAB: not subscribed (book ACORN.LAB)"]
    before = c.version
    c.decode(msg("exchange", 2, "f", [(324, "st-ACORN.LAB"), (55, "ACORN.LAB"), (325, "Y"), (326, "2"),
                                      (625, "9"), (58, "news [pending]")]))
    assert c.version > before
    said = "ACORN.LAB [Halted: news [pending]]: not subscribed (book ACORN.LAB)"
    assert c.book_lines("ACORN.LAB") == [said]
