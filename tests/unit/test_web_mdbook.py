"""The books a lab session's own W and X rebuild, as the page shows them (beside the matcher's)."""

from __future__ import annotations

from decimal import Decimal

from shared.config import Instrument
from shared.fix import dictionary
from shared.fix.mdbook import MdBooks
from shared.fix.wire import parse

D = dictionary.load()
ACORN = Instrument("ACORN.LAB", 10_000, Decimal("0.01"))


def fix(body: str) -> bytes:
    b = body.replace("|", "\x01").encode()
    head = b"8=FIX.4.4\x019=" + str(len(b)).encode() + b"\x01"
    return head + b + b"10=%03d\x01" % (sum(head + b) % 256)


HEAD = "49=FIXLAB|52=20260101-12:00:00.000|56=LAB001|"


def test_snapshot_then_incremental_refreshes_rebuild_the_book() -> None:
    books = MdBooks([ACORN])
    snap = parse(fix(f"35=W|34=3|{HEAD}262=r1|55=ACORN.LAB|268=3|269=0|270=99.5|271=10|346=2|"
                     "269=1|270=100.50|271=4|346=1|269=2|270=100.0|271=3|"), D)
    assert books.apply(snap) == ["ACORN.LAB"]
    view = books.view("ACORN.LAB")
    assert view["bids"] == [["99.50", 10, 2]] and view["asks"] == [["100.50", 4, 1]]  # the trade is no level
    inc = parse(fix(f"35=X|34=4|{HEAD}262=r1|268=4|279=0|269=0|55=ACORN.LAB|270=99.60|271=5|346=1|"
                    "279=1|269=0|55=ACORN.LAB|270=99.50|271=7|346=1|279=2|269=1|55=ACORN.LAB|270=100.5|"
                    "279=0|269=2|55=ACORN.LAB|270=100.50|271=4|"), D)
    assert books.apply(inc) == ["ACORN.LAB"]
    view = books.view("ACORN.LAB")
    assert view == {"type": "md_book", "symbol": "ACORN.LAB", "subscribed": True,
                    "bids": [["99.60", 5, 1], ["99.50", 7, 1]], "asks": []}
    # a W replaces the whole book
    books.apply(parse(fix(f"35=W|34=5|{HEAD}262=r1|55=ACORN.LAB|268=1|269=1|270=101|271=1|346=1|"), D))
    assert books.view("ACORN.LAB")["bids"] == [] and books.view("ACORN.LAB")["asks"] == [["101.00", 1, 1]]
    books.forget("ACORN.LAB")
    assert books.view("ACORN.LAB")["subscribed"] is False


def test_updates_before_a_snapshot_and_other_messages_are_ignored() -> None:
    books = MdBooks([ACORN])
    inc = parse(fix(f"35=X|34=4|{HEAD}262=r1|268=1|279=0|269=0|55=ACORN.LAB|270=99.60|271=5|346=1|"), D)
    assert books.apply(inc) == []
    assert books.apply(parse(fix(f"35=0|34=5|{HEAD}"), D)) == []
    assert books.view("ACORN.LAB")["subscribed"] is False


def test_an_unsubscribe_or_a_reject_ends_the_book() -> None:
    books = MdBooks([ACORN])
    sub = parse(fix("35=V|34=2|49=LAB001|52=20260101-12:00:00.000|56=FIXLAB|262=r1|263=1|264=0|265=1|"
                    "267=1|269=0|146=1|55=ACORN.LAB|"), D)
    assert books.sent(sub) == []
    books.apply(parse(fix(f"35=W|34=3|{HEAD}262=r1|55=ACORN.LAB|268=1|269=0|270=99.5|271=10|346=2|"), D))
    assert books.view("ACORN.LAB")["subscribed"] is True
    unsub = parse(fix("35=V|34=3|49=LAB001|52=20260101-12:00:00.000|56=FIXLAB|262=r1|263=2|264=0|"
                      "267=1|269=0|146=1|55=ACORN.LAB|"), D)
    assert books.sent(unsub) == ["ACORN.LAB"]
    assert books.view("ACORN.LAB")["subscribed"] is False
    books.sent(parse(fix("35=V|34=4|49=LAB001|52=20260101-12:00:00.000|56=FIXLAB|262=r2|263=1|264=0|"
                         "267=1|269=0|146=1|55=NOPE.LAB|"), D))
    assert books.apply(parse(fix(f"35=Y|34=5|{HEAD}262=r2|281=0|58=unknown symbol|"), D)) == ["NOPE.LAB"]
    assert books.view("NOPE.LAB")["subscribed"] is False
