"""Indicative market data in a call: the uncross price (269=4/5), the imbalance (269=A), as W entries
and as X new/change/delete, only to subscriptions that ask for them; the FIX 5.0 SP2 dialect's Q."""

from __future__ import annotations

from services.gateway.marketdata import MarketData, parse_request
from shared.schema import BUY, PHASE_CONTINUOUS, PHASE_HALTED, PHASE_PRE_CLOSE, PHASE_PRE_OPEN, SELL
from tests.unit.test_marketdata import ACORN, BIRCH, fields, groups, v


def md_in_call(phase: int = PHASE_PRE_OPEN) -> MarketData:
    md = MarketData([ACORN, BIRCH])
    md.apply_image("ACORN.LAB", ((10050, 30, 3),), ((10050, 35, 3),))
    md.apply_image("BIRCH.LAB", (), ())
    md.apply_phase("ACORN.LAB", phase)
    md.apply_indicative("ACORN.LAB", 10050, 30, 5, SELL)
    return md


def test_requests_may_ask_for_indicative_price_and_imbalance() -> None:
    assert parse_request(v("r", types="014A")).types == frozenset("014A")
    assert parse_request(v("r", types="Q")).types == frozenset("Q")


def test_w_in_the_opening_call_shows_the_indicative_price_and_imbalance() -> None:
    md = md_in_call()
    (_, body), = md.request("S", v("r1", types="014A"))
    kinds = {e[269]: e for e in groups(body, 269)}
    assert kinds["4"] == {269: "4", 270: "100.50", 271: "30", 625: "2"}
    assert kinds["A"] == {269: "A", 270: "100.50", 271: "5", 625: "2", 277: "Q"}  # more sellers
    assert fields(body)[268] == "4"


def test_entry_kind_follows_the_call_and_only_askers_get_them() -> None:
    for phase, kind, sub_id in ((PHASE_PRE_CLOSE, "5", "4"), (PHASE_HALTED, "4", "9")):
        (_, body), = md_in_call(phase).request("S", v("r", types="5"))
        assert [(e[269], e[625]) for e in groups(body, 269)] == [(kind, sub_id)]
    (_, plain), = md_in_call().request("S", v("r", types="012"))
    assert {e[269] for e in groups(plain, 269)} == {"0", "1"}
    (_, only_a), = md_in_call().request("S", v("r", types="A"))
    assert [e[269] for e in groups(only_a, 269)] == ["A"]


def test_x_tells_new_change_and_delete_of_the_indicative() -> None:
    md = MarketData([ACORN, BIRCH])
    md.apply_image("ACORN.LAB", (), ())
    (_, w), = md.request("S", v("r1", types="4A"))
    assert fields(w)[268] == "0"  # continuous: no indicative
    assert md.flush() == []
    md.apply_phase("ACORN.LAB", PHASE_PRE_OPEN)
    md.apply_indicative("ACORN.LAB", 0, 0, 0, 0)
    assert md.flush() == []  # a call, but nothing crosses
    md.apply_indicative("ACORN.LAB", 10100, 4, 6, BUY)
    (_, x), = md.flush()
    assert [(e[279], e[269], e[270], e[271], e.get(277)) for e in groups(x, 279)] == [
        ("0", "4", "101.00", "4", None), ("0", "A", "101.00", "6", "P")]
    md.apply_indicative("ACORN.LAB", 10100, 10, 0, 0)
    (_, x), = md.flush()
    assert [(e[279], e[269], e[271], e.get(277)) for e in groups(x, 279)] == [
        ("1", "4", "10", None), ("1", "A", "0", None)]  # balanced: no TradeCondition
    assert md.flush() == []
    # the uncross: the last Indicative (volume 0), then the phase
    md.apply_indicative("ACORN.LAB", 0, 0, 0, 0)
    md.apply_phase("ACORN.LAB", PHASE_CONTINUOUS)
    (_, x), = md.flush()
    assert [(e[279], e[269], e[270]) for e in groups(x, 279)] == [("2", "4", "101.00"), ("2", "A", "101.00")]


def test_a_subscriber_joining_between_flushes_starts_from_its_w() -> None:
    md = md_in_call()
    md.request("S", v("early", types="4"))
    md.flush()
    md.apply_indicative("ACORN.LAB", 10050, 31, 4, SELL)
    md.request("T", v("late", types="4"))  # its W already shows volume 31
    outs = md.flush()
    assert [fields(b)[262] for _, b in outs] == ["early"]
    assert groups(outs[0][1], 279)[0][271] == "31"


def test_a_full_refresh_subscription_gets_a_w_when_the_indicative_moves() -> None:
    md = md_in_call()
    md.request("S", v("full", types="4", update="0"))
    md.flush()
    md.apply_indicative("ACORN.LAB", 10040, 20, 0, 0)
    (_, body), = md.flush()
    assert fields(body)[35] == "W" and groups(body, 269)[0][270] == "100.40"

