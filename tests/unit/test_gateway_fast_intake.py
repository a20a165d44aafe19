"""The intake's fast path (Inbound.new_order, shared.fix.reader) against the path it falls back to
(split_fields + Inbound.command): for generated NewOrderSingles, valid and with every defect the
translation refuses, Publisher.group gives the same wire tuples per stream and the same refusals."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.gateway import intake
from services.gateway.inbound import Inbound
from services.gateway.intake import Publisher
from services.gateway.resp import RespConnection
from shared.config import Instrument
from shared.schema import STP_CANCEL_BOTH, NewOrder

ACORN = Instrument("ACORN.LAB", 10_000, Decimal("0.01"))
BIRCH = Instrument("BIRCH.LAB", 2_500, Decimal("0.05"), shard="b")
INSTS = [ACORN, BIRCH]
TS = 1_767_225_600_123_456_789
NOS = ((35, "D"), (34, "7"), (49, "CLIENT01"), (52, "20260101-00:00:00.000"), (56, "FIXLAB"),
       (11, "o1"), (38, "10"), (40, "2"), (44, "100.25"), (54, "1"), (55, "ACORN.LAB"), (59, "1"),
       (60, "20260101-00:00:00.000"))

# Each tag's values: valid ones first, then what the translation refuses or reads otherwise.
VALUES = {
    35: ["D", "F", "G", "H", "q", "8", "", "d"],
    34: ["7", "1", "0", "", "x", "-1", "007", "٣"],
    49: ["CLIENT01", "C2", "", "é"],
    11: ["o1", "", "a=b", " x ", "x59=1", "\udcff"],
    38: ["10", "1", "10.00", "0", "-5", "10.5", "abc", "", "1e1", "1E+1", "NaN", " 10", "٣", "0010"],
    40: ["2", "1", "", "02", "2 "],
    44: ["100.25", "100", "0.05", "100.250", "100.2", "100.255", "0", "-1", "abc", "", "1e2", "NaN",
         "Infinity", " 100", "1_00", "٣", "+100.25", ".5"],
    54: ["1", "2", "3", "", "0", "11", " 1"],
    55: ["ACORN.LAB", "BIRCH.LAB", "NOPE", "", "acorn.lab"],
    59: ["0", "1", "3", "4", "2", "5", "", "00"],
}
TAG = st.sampled_from(sorted(VALUES))


def value(tag: int) -> st.SearchStrategy[str]:
    return st.one_of(st.sampled_from(VALUES[tag]),
                     st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=6))


@st.composite
def message(draw: st.DrawFn) -> str:
    """A NewOrderSingle's text as QuickFIX's toString gives it, perhaps with defects."""
    changed = draw(st.sets(st.sampled_from(sorted(VALUES)), max_size=3))
    fields = [(tag, draw(value(tag))) if tag in changed else (tag, v) for tag, v in NOS]
    missing = draw(st.sets(st.sampled_from([tag for tag, _ in NOS]), max_size=2))
    fields = [f for f in fields if f[0] not in missing]
    for _ in range(draw(st.integers(0, 2))):  # repeated tags, anywhere
        tag = draw(TAG)
        fields.insert(draw(st.integers(0, len(fields))), (tag, draw(value(tag))))
    pieces = [f"{tag}={v}" for tag, v in draw(st.permutations(fields))]
    for _ in range(draw(st.integers(0, 1))):  # an empty piece or one that is no field at all
        pieces.insert(draw(st.integers(0, len(pieces))), draw(st.sampled_from(["", "abc", "=1", "5x=1"])))
    return "8=FIX.4.4\x019=150\x01" + "".join(p + "\x01" for p in pieces) + "10=123\x01"


def publishers() -> tuple[Publisher, Publisher]:
    def one() -> Publisher:
        inbound = Inbound(INSTS, "gw1", stp={"CLIENT01": STP_CANCEL_BOTH})
        return Publisher(RespConnection("redis://127.0.0.1:1/0"), inbound, INSTS, 1000, "")
    fast, old = one(), one()
    old.fast_path = False
    return fast, old


@settings(max_examples=400, deadline=None)
@given(st.lists(message(), min_size=1, max_size=6))
def test_the_fast_path_translates_exactly_as_the_split_fields_path(texts: list[str]) -> None:
    fast, old = publishers()
    batch = [(text, TS + i) for i, text in enumerate(texts)]
    assert fast.group(batch) == old.group(batch)
    assert (fast.refused, fast.errors) == (old.refused, old.errors)


def test_valid_orders_of_every_side_and_tif_are_read_by_the_fast_path() -> None:
    fast, old = publishers()
    texts = []
    for side in "12":
        for tif in "0134":
            text = "8=FIX.4.4\x019=1\x01" + "".join(f"{t}={v}\x01" for t, v in NOS) + "10=000\x01"
            texts.append(text.replace("\x0154=1\x01", f"\x0154={side}\x01")
                         .replace("\x0159=1\x01", f"\x0159={tif}\x01"))
    batch = [(text, TS) for text in texts]
    assert fast.group(batch) == old.group(batch)
    got = fast.inbound.new_order(texts[0], TS)
    assert got == NewOrder("CLIENT01", "o1", "ACORN.LAB", 1, 10_025, 10, 0, "gw1", 7, TS, STP_CANCEL_BOTH)
    day = fast.inbound.new_order(texts[1].replace("\x0159=1\x01", "\x01"), TS)  # no 59: Day
    assert day == NewOrder("CLIENT01", "o1", "ACORN.LAB", 1, 10_025, 10, 0, "gw1", 7, TS, STP_CANCEL_BOTH)


def test_a_valid_order_does_not_reach_split_fields_and_anything_else_does(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(text: str) -> dict[str, str]:
        raise RuntimeError("split_fields called")

    monkeypatch.setattr(intake, "split_fields", refuse)
    fast, old = publishers()
    text = "8=FIX.4.4\x019=1\x01" + "".join(f"{t}={v}\x01" for t, v in NOS) + "10=000\x01"
    grouped, count = fast.group([(text, TS)])
    assert (count, fast.errors) == (1, 0) and len(next(iter(grouped.values()))) == 1
    grouped, count = fast.group([(text.replace("\x0159=1\x01", "\x01"), TS)])  # no 59 (Day) too
    assert (count, fast.errors) == (1, 0)
    old.group([(text, TS)])
    assert old.errors == 1  # the old path does call it
    fast.group([(text.replace("\x0155=ACORN.LAB", "\x0155=NOPE"), TS)])  # a refusal falls back
    fast.group([(text.replace("\x0135=D", "\x0135=F"), TS)])  # so does every other type
    assert fast.errors == 2
