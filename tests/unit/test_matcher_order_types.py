"""The engine's order types and self-trade prevention: IOC, FOK, STP modes, old wire forms."""

from __future__ import annotations

import pytest

from services.matcher.engine import Engine, MalformedCommand
from shared.schema import (
    BUY,
    DAY,
    FOK,
    GTC,
    IOC,
    SELL,
    STP_CANCEL_AGGRESSOR,
    STP_CANCEL_BOTH,
    STP_CANCEL_RESTING,
    STP_OFF,
    Accepted,
    Cancelled,
    Filled,
    Message,
    NewOrder,
    Replaced,
    as_wire,
    decode,
    encode,
)
from tests.unit.test_matcher_engine import ACORN, BIRCH, Client, engine


class StpClient(Client):
    """A gateway's client whose session has self-trade prevention ``stp``."""

    def __init__(self, session: str, stp: int) -> None:
        super().__init__(session)
        self.stp = stp

    def new(self, side: int, price: int, qty: int, symbol: str = "ACORN.LAB", tif: int = DAY,
            clordid: str | None = None) -> NewOrder:
        order = super().new(side, price, qty, symbol, tif, clordid)
        return NewOrder(*as_wire(order)[1:11], self.stp)


def kinds(events: list[Message]) -> list[str]:
    return [type(ev).__name__ for ev in events]


def resting(e: Engine) -> list[tuple[str, str, int]]:
    return [(o.session, o.clordid, o.leaves) for b in e.books.values() for o in b.orders()]


# --------------------------------------------------------------------------- IOC

def test_ioc_trades_what_it_can_and_cancels_the_rest() -> None:
    e, a, b = engine(), Client("A"), Client("B")
    e.apply(a.new(SELL, 10000, 3))
    e.apply(a.new(SELL, 10001, 2))
    ioc = b.new(BUY, 10001, 8, tif=IOC)
    events = e.apply(ioc)
    assert kinds(events) == ["Accepted", "Filled", "Filled", "Trade", "Filled", "Filled", "Trade",
                             "Cancelled", "Depth"]
    acc, cancel = events[0], events[7]
    assert isinstance(acc, Accepted) and acc.tif == IOC
    assert isinstance(cancel, Cancelled)
    assert (cancel.clordid, cancel.orig_clordid, cancel.order_id) == (ioc.clordid, ioc.clordid, acc.order_id)
    assert (cancel.qty, cancel.cum_qty, cancel.cum_cost) == (8, 5, 3 * 10000 + 2 * 10001)
    assert cancel.text == "IOC: remainder cancelled"
    assert resting(e) == [] and e.open_orders("B") == []


def test_ioc_that_does_not_cross_is_cancelled_and_one_that_fills_is_not() -> None:
    e, a, b = engine(), Client("A"), Client("B")
    events = e.apply(b.new(BUY, 9990, 4, tif=IOC))
    assert kinds(events) == ["Accepted", "Cancelled", "Depth"]
    assert events[1].cum_qty == 0  # type: ignore[attr-defined]
    e.apply(a.new(SELL, 10000, 5))
    assert kinds(e.apply(b.new(BUY, 10000, 5, tif=IOC))) == ["Accepted", "Filled", "Filled", "Trade", "Depth"]
    assert resting(e) == []


def test_ioc_and_fok_are_not_held_to_the_open_orders_limit() -> None:
    e, a = engine(max_open_per_session=2), Client("A")
    e.apply(a.new(BUY, 9000, 1))
    e.apply(a.new(BUY, 9001, 1))
    for tif in (IOC, FOK):
        assert kinds(e.apply(a.new(BUY, 9002, 1, tif=tif))) == ["Accepted", "Cancelled", "Depth"]


def test_a_closed_ioc_cannot_be_cancelled_or_replaced() -> None:
    e, a = engine(), Client("A")
    ioc = a.new(BUY, 9990, 4, tif=IOC)
    e.apply(ioc)
    [rej] = e.apply(a.cancel(ioc.clordid, BUY))
    assert (rej.status, "no longer open (cancelled)" in rej.text) == (4, True)  # type: ignore[attr-defined]
    [rej] = e.apply(a.replace(ioc.clordid, BUY, 9991, 4))
    assert rej.status == 4  # type: ignore[attr-defined]


# --------------------------------------------------------------------------- FOK

def test_fok_that_cannot_fill_completely_changes_nothing() -> None:
    e, a, b = engine(), Client("A"), Client("B")
    e.apply(a.new(SELL, 10000, 3))
    e.apply(a.new(SELL, 10002, 5))
    fok = b.new(BUY, 10001, 4, tif=FOK)  # 3 available at or below 100.01
    events = e.apply(fok)
    assert kinds(events) == ["Accepted", "Cancelled", "Depth"]
    cancel = events[1]
    assert isinstance(cancel, Cancelled) and cancel.cum_qty == 0
    assert cancel.text == "FOK: 4 cannot all trade at once at 100.01 or better; cancelled"
    assert resting(e) == [("A", "A-1", 3), ("A", "A-2", 5)]


def test_fok_that_can_fill_trades_across_levels() -> None:
    e, a, b = engine(), Client("A"), Client("B")
    e.apply(a.new(SELL, 10000, 3))
    e.apply(a.new(SELL, 10002, 5))
    events = e.apply(b.new(BUY, 10002, 8, tif=FOK))
    assert kinds(events) == ["Accepted", "Filled", "Filled", "Trade", "Filled", "Filled", "Trade", "Depth"]
    assert events[4].leaves_qty == 0 and resting(e) == []  # type: ignore[attr-defined]


def test_fok_on_a_pro_rata_book() -> None:
    e, a, c, b = engine(), Client("A"), Client("C"), Client("B")
    e.apply(a.new(SELL, 2500, 100, symbol="BIRCH.LAB"))
    e.apply(c.new(SELL, 2500, 300, symbol="BIRCH.LAB"))
    assert kinds(e.apply(b.new(BUY, 2500, 401, symbol="BIRCH.LAB", tif=FOK)))[:2] == ["Accepted", "Cancelled"]
    events = e.apply(b.new(BUY, 2500, 200, symbol="BIRCH.LAB", tif=FOK))
    makers = [ev for ev in events if isinstance(ev, Filled) and ev.session != "B"]
    assert [(m.session, m.last_qty) for m in makers] == [("A", 50), ("C", 150)]
    assert resting(e) == [("A", "A-1", 50), ("C", "C-1", 150)]


# --------------------------------------------------------------------------- self-trade prevention

def _own_then_other(stp: int, symbol: str = "ACORN.LAB", price: int = 10000) -> tuple[Engine, StpClient]:
    """A rests 2 then B rests 3, both selling at ``price``; A's session has ``stp``."""
    e, a, b = engine(), StpClient("A", stp), Client("B")
    e.apply(a.new(SELL, price, 2, symbol=symbol))
    e.apply(b.new(SELL, price, 3, symbol=symbol))
    return e, a


def test_without_prevention_a_session_trades_with_itself() -> None:
    e, a = _own_then_other(STP_OFF)
    events = e.apply(a.new(BUY, 10000, 4))
    fills = [(f.session, f.clordid, f.last_qty) for f in events if isinstance(f, Filled)]
    assert fills == [("A", "A-2", 2), ("A", "A-1", 2), ("A", "A-2", 2), ("B", "B-1", 2)]


def test_cancel_resting_cancels_the_own_order_and_trades_on() -> None:
    e, a = _own_then_other(STP_CANCEL_RESTING)
    events = e.apply(a.new(BUY, 10000, 4))
    assert kinds(events) == ["Accepted", "Cancelled", "Filled", "Filled", "Trade", "Depth"]
    cancel = events[1]
    assert isinstance(cancel, Cancelled) and (cancel.clordid, cancel.cum_qty) == ("A-1", 0)
    assert cancel.text == ("self-trade prevention: cancelled, it would have traded with A-2 of the same "
                           "session")
    assert [f.last_qty for f in events if isinstance(f, Filled)] == [3, 3]
    assert resting(e) == [("A", "A-2", 1)]
    assert [o.clordid for o in e.open_orders("A")] == ["A-2"]


def test_cancel_aggressor_cancels_the_incoming_remainder_and_keeps_the_resting_order() -> None:
    e, a, b = engine(), StpClient("A", STP_CANCEL_AGGRESSOR), Client("B")
    e.apply(b.new(SELL, 10000, 1))
    e.apply(a.new(SELL, 10000, 2))
    e.apply(b.new(SELL, 10000, 3))
    events = e.apply(a.new(BUY, 10000, 5))
    assert kinds(events) == ["Accepted", "Filled", "Filled", "Trade", "Cancelled", "Depth"]
    cancel = events[4]
    assert isinstance(cancel, Cancelled) and (cancel.clordid, cancel.cum_qty) == ("A-2", 1)
    assert cancel.text == ("self-trade prevention: remainder cancelled, it would have traded with A-1 of the "
                           "same session")
    assert resting(e) == [("A", "A-1", 2), ("B", "B-2", 3)]


def test_cancel_both_cancels_both_orders() -> None:
    e, a = _own_then_other(STP_CANCEL_BOTH)
    events = e.apply(a.new(BUY, 10000, 4, tif=GTC))
    assert kinds(events) == ["Accepted", "Cancelled", "Cancelled", "Depth"]
    assert [ev.clordid for ev in events if isinstance(ev, Cancelled)] == ["A-1", "A-2"]
    assert "(and that order cancelled)" in events[2].text  # type: ignore[attr-defined]
    assert resting(e) == [("B", "B-1", 3)] and e.open_orders("A") == []


@pytest.mark.parametrize(("stp", "left", "cancelled"), [
    (STP_CANCEL_RESTING, [("B", "B-1", 100)], ["A-1"]),  # then the IOC fills in full with B
    (STP_CANCEL_AGGRESSOR, [("A", "A-1", 100), ("B", "B-1", 300)], ["A-2"]),
    (STP_CANCEL_BOTH, [("B", "B-1", 300)], ["A-1", "A-2"]),
])
def test_on_a_pro_rata_level_any_own_order_counts(stp: int, left: list[tuple[str, str, int]],
                                                  cancelled: list[str]) -> None:
    # Pro-rata would give A's own 100 a share of 50 of the 200: the level is shared, so any own
    # order in it is a self-trade, whatever its share.
    e, a = engine(), StpClient("A", stp)
    e.apply(a.new(SELL, 2500, 100, symbol="BIRCH.LAB"))
    e.apply(Client("B").new(SELL, 2500, 300, symbol="BIRCH.LAB"))
    events = e.apply(a.new(BUY, 2500, 200, symbol="BIRCH.LAB", tif=IOC))
    assert not any(isinstance(f, Filled) and f.clordid == "A-1" for f in events)
    assert resting(e) == left
    assert [ev.clordid for ev in events if isinstance(ev, Cancelled)] == cancelled


def test_fok_counts_only_what_prevention_lets_it_trade() -> None:
    e, a = _own_then_other(STP_CANCEL_RESTING)  # 3 of B's available, A's own 2 are not
    events = e.apply(a.new(BUY, 10000, 4, tif=FOK))
    assert kinds(events) == ["Accepted", "Cancelled", "Depth"] and "FOK" in events[1].text  # type: ignore[attr-defined]
    assert resting(e) == [("A", "A-1", 2), ("B", "B-1", 3)]  # a killed FOK cancels nothing
    events = e.apply(a.new(BUY, 10000, 3, tif=FOK))
    assert kinds(events) == ["Accepted", "Cancelled", "Filled", "Filled", "Trade", "Depth"]
    assert resting(e) == []


def test_a_replace_that_trades_keeps_its_orders_prevention() -> None:
    e, a, b = engine(), StpClient("A", STP_CANCEL_AGGRESSOR), Client("B")
    e.apply(a.new(SELL, 10001, 2))
    e.apply(a.new(BUY, 9990, 4))
    events = e.apply(a.replace("A-2", BUY, 10001, 4))
    assert kinds(events) == ["Replaced", "Cancelled", "Depth"]
    assert isinstance(events[0], Replaced) and events[1].clordid == "A-3"  # type: ignore[attr-defined]
    assert "self-trade prevention" in events[1].text  # type: ignore[attr-defined]
    assert resting(e) == [("A", "A-1", 2)] and [o.clordid for o in e.open_orders("A")] == ["A-1"]
    assert isinstance(e.apply(b.new(BUY, 10001, 2))[1], Filled)


def test_other_sessions_are_not_affected_by_prevention() -> None:
    e, a, b = engine(), StpClient("A", STP_CANCEL_BOTH), StpClient("B", STP_CANCEL_BOTH)
    e.apply(a.new(SELL, 10000, 2))
    assert kinds(e.apply(b.new(BUY, 10000, 2))) == ["Accepted", "Filled", "Filled", "Trade", "Depth"]


# --------------------------------------------------------------------------- wire forms and recovery

def test_the_wire_form_before_stp_reads_as_off() -> None:
    e, a = engine(), Client("A")
    old = as_wire(a.new(SELL, 10000, 2))[:11]
    assert len(old) == 11
    assert kinds(e.apply(old)) == ["Accepted", "Depth"]
    assert kinds(e.apply(as_wire(a.new(BUY, 10000, 1))[:11])) == ["Accepted", "Filled", "Filled", "Trade",
                                                                   "Depth"]


def test_an_unknown_stp_mode_is_malformed() -> None:
    e = engine()
    with pytest.raises(MalformedCommand, match=r"NewOrder\.stp=7"):
        e.apply(NewOrder("A", "c", "ACORN.LAB", BUY, 10000, 1, DAY, "gw", 1, 1, 7))
    assert e.sessions == {}


def test_prevention_survives_a_snapshot_and_old_snapshots_load() -> None:
    e, a = engine(), StpClient("A", STP_CANCEL_AGGRESSOR)
    e.apply(a.new(SELL, 10001, 2))
    e.apply(a.new(BUY, 9990, 4))
    snap = decode(encode(e.snapshot("0", "1-0", 5)))
    restored = Engine.restore(snap, [ACORN, BIRCH])  # type: ignore[arg-type]
    assert [o.stp for o in restored.open_orders("A")] == [STP_CANCEL_AGGRESSOR] * 2
    replace = a.replace("A-2", BUY, 10001, 4)
    assert e.apply(replace) == restored.apply(replace)
    # A snapshot written before Order.stp: 12 items per order.
    old = snap.__class__(*[getattr(snap, f) for f in snap._FIELDS[:5]],
                         tuple(o[:12] for o in snap.orders), *[getattr(snap, f) for f in snap._FIELDS[6:]])
    assert [o.stp for o in Engine.restore(old, [ACORN, BIRCH]).open_orders("A")] == [STP_OFF] * 2  # type: ignore[arg-type]


def test_a_redelivered_ioc_yields_nothing() -> None:
    e, a = engine(), Client("A")
    ioc = a.new(BUY, 10000, 2, tif=IOC)
    assert kinds(e.apply(ioc)) == ["Accepted", "Cancelled", "Depth"]
    assert e.apply(ioc) == []
