"""Phases in the engine: the call book, the uncross and its events, market, stop and At-the-Open/Close
orders, the close, and snapshot + replay mid-call (issue 31)."""

from __future__ import annotations

import random
from decimal import Decimal

from hypothesis import given, settings
from hypothesis import strategies as st

from services.matcher.engine import RESTATED, Engine
from shared.config import Instrument
from shared.schema import (
    AT_CLOSE,
    AT_OPEN,
    BUY,
    DAY,
    GTC,
    IOC,
    ORD_LIMIT,
    ORD_MARKET,
    ORD_STOP,
    ORD_STOP_LIMIT,
    PHASE_CLOSED,
    PHASE_CONTINUOUS,
    PHASE_HALTED,
    PHASE_PRE_CLOSE,
    PHASE_PRE_OPEN,
    REJ_EXCHANGE_CLOSED,
    SELL,
    Accepted,
    BookUpdate,
    Cancelled,
    CancelOrder,
    Depth,
    Filled,
    ImageRequest,
    Indicative,
    Message,
    NewOrder,
    PhaseChanged,
    Rejected,
    Replaced,
    ReplaceOrder,
    SetPhase,
    Trade,
    Triggered,
    decode,
    encode,
)

ACORN = Instrument("ACORN.LAB", 10000, Decimal("0.01"))
BIRCH = Instrument("BIRCH.LAB", 2500, Decimal("0.01"), pro_rata=True)


class Client:
    def __init__(self, session: str) -> None:
        self.session = session
        self.n = 0

    def new(self, side: int, price: int, qty: int, symbol: str = "ACORN.LAB", tif: int = DAY,
            ord_type: int = ORD_LIMIT, stop_px: int = 0) -> NewOrder:
        self.n += 1
        return NewOrder(self.session, f"{self.session}-{self.n}", symbol, side, price, qty, tif, "gw", self.n,
                        self.n, 0, ord_type, stop_px)

    def cancel(self, orig: str, side: int, symbol: str = "ACORN.LAB") -> CancelOrder:
        self.n += 1
        return CancelOrder(self.session, f"{self.session}-{self.n}", orig, symbol, side, "gw", self.n, self.n)

    def replace(self, orig: str, side: int, price: int, qty: int) -> ReplaceOrder:
        self.n += 1
        return ReplaceOrder(self.session, f"{self.session}-{self.n}", orig, "ACORN.LAB", side, price, qty,
                            "gw", self.n, self.n)


def engine() -> Engine:
    return Engine([ACORN, BIRCH], book_updates=True)


def of(events: list[Message], cls: type) -> list:
    return [e for e in events if isinstance(e, cls)]


def test_set_phase_is_idempotent_and_says_so_once() -> None:
    e = engine()
    assert e.apply(SetPhase("ACORN.LAB", PHASE_CONTINUOUS, "", 1)) == []
    first = e.apply(SetPhase("ACORN.LAB", PHASE_PRE_OPEN, "open call", 2))
    want = PhaseChanged("ACORN.LAB", PHASE_PRE_OPEN, PHASE_CONTINUOUS, "open call", 2)
    assert of(first, PhaseChanged) == [want]
    assert e.apply(SetPhase("ACORN.LAB", PHASE_PRE_OPEN, "again", 3)) == []
    everything = e.apply(SetPhase("*", PHASE_HALTED, "halt all", 4))
    assert [(p.symbol, p.phase, p.prev_phase) for p in of(everything, PhaseChanged)] == [
        ("ACORN.LAB", PHASE_HALTED, PHASE_PRE_OPEN), ("BIRCH.LAB", PHASE_HALTED, PHASE_CONTINUOUS)]
    assert e.apply(SetPhase("OTHER.LAB", PHASE_CLOSED, "", 5)) == []  # another shard's


def test_in_a_call_nothing_trades_and_the_indicative_follows_the_book() -> None:
    e = engine()
    a, b = Client("A"), Client("B")
    e.apply(SetPhase("ACORN.LAB", PHASE_PRE_OPEN, "", 1))
    ev = e.apply(a.new(BUY, 10100, 10))
    assert of(ev, Accepted) and not of(ev, Filled)
    assert not of(ev, Indicative)  # nothing crosses yet: the call's first Indicative said so already
    ev = e.apply(b.new(SELL, 10000, 4))
    assert not of(ev, Filled) and not of(ev, Trade)
    assert of(ev, Indicative) == [Indicative("ACORN.LAB", 10100, 4, 6, BUY, 1)]
    d = of(ev, Depth)[0]
    assert d.bids[0][0] == 10100 and d.asks[0][0] == 10000  # the call book is crossed
    # amended: the sell grows to 10 -> 10 at 10100... (both candidates execute 10, no surplus)
    ev = e.apply(b.replace("B-1", SELL, 10000, 10))
    assert of(ev, Replaced) and not of(ev, Filled)
    assert of(ev, Indicative)[0].volume == 10 and of(ev, Indicative)[0].imbalance_qty == 0
    ev = e.apply(b.cancel("B-2", SELL))
    assert of(ev, Cancelled) and of(ev, Indicative)[0] == Indicative("ACORN.LAB", 0, 0, 0, 0, 3)


def test_the_opening_uncross_event_sequence() -> None:
    e = engine()
    a, b, c = Client("A"), Client("B"), Client("C")
    e.apply(SetPhase("ACORN.LAB", PHASE_PRE_OPEN, "", 1))
    for cmd in (a.new(BUY, 10100, 5), a.new(BUY, 10050, 5), b.new(SELL, 10000, 3), b.new(SELL, 10050, 4),
                c.new(SELL, 10200, 9), c.new(BUY, 10000, 2, tif=AT_OPEN)):
        e.apply(cmd)
    ev = e.apply(SetPhase("ACORN.LAB", PHASE_CONTINUOUS, "open", 9))
    kinds = [type(m).__name__ for m in ev]
    # Filled (buy), Filled (sell), Trade per match; then the At-the-Open remainder cancelled; the book's
    # BookUpdate and Depth; the last Indicative (volume 0); PhaseChanged.
    assert kinds == ["Filled", "Filled", "Trade", "Filled", "Filled", "Trade", "Filled", "Filled", "Trade",
                     "Cancelled", "BookUpdate", "Depth", "Indicative", "PhaseChanged"]
    trades = of(ev, Trade)
    assert {t.price for t in trades} == {10050} and sum(t.qty for t in trades) == 7
    assert all(t.aggressor_side == 0 for t in trades)
    fills = of(ev, Filled)
    assert all(f.last_px == 10050 for f in fills)
    for t in trades:  # the match id is shared by both sides
        assert sorted(f.side for f in fills if f.match_id == t.match_id) == [BUY, SELL]
    # price-time: A-1 (10100) fills 5 first, then A-2 (10050) 2 of 5
    assert [(f.clordid, f.last_qty) for f in fills if f.side == BUY] == [("A-1", 3), ("A-1", 2), ("A-2", 2)]
    (cancel,) = of(ev, Cancelled)
    assert cancel.clordid == "C-2" and "At the Opening" in cancel.text
    assert of(ev, Indicative) == [Indicative("ACORN.LAB", 0, 0, 0, 0, 9)]
    assert of(ev, PhaseChanged)[0].phase == PHASE_CONTINUOUS
    assert not e.books["ACORN.LAB"].is_crossed()
    # continuous again: plain orders trade
    assert of(e.apply(b.new(SELL, 10050, 3)), Trade)


def test_pro_rata_instrument_shares_the_uncross_level() -> None:
    e = engine()
    a, b, c = Client("A"), Client("B"), Client("C")
    e.apply(SetPhase("BIRCH.LAB", PHASE_HALTED, "halt", 1))
    e.apply(a.new(BUY, 2500, 100, "BIRCH.LAB"))
    e.apply(b.new(BUY, 2500, 300, "BIRCH.LAB"))
    e.apply(c.new(SELL, 2500, 200, "BIRCH.LAB"))
    ev = e.apply(SetPhase("BIRCH.LAB", PHASE_CONTINUOUS, "resume", 2))
    buys = {f.session: f.last_qty for f in of(ev, Filled) if f.side == BUY}
    assert buys == {"A": 50, "B": 150}


def test_market_orders_in_a_call_have_top_priority_and_what_is_left_is_cancelled() -> None:
    e = engine()
    a, b = Client("A"), Client("B")
    e.apply(SetPhase("ACORN.LAB", PHASE_PRE_OPEN, "", 1))
    e.apply(a.new(BUY, 10100, 5))
    ev = e.apply(a.new(BUY, 0, 5, ord_type=ORD_MARKET))
    assert of(ev, Accepted)[0].ord_type == ORD_MARKET
    e.apply(b.new(SELL, 10000, 6))
    ev = e.apply(SetPhase("ACORN.LAB", PHASE_CONTINUOUS, "", 2))
    buys = [(f.clordid, f.last_qty, f.last_px, f.ord_type) for f in of(ev, Filled) if f.side == BUY]
    assert buys == [("A-2", 5, 10100, ORD_MARKET), ("A-1", 1, 10100, ORD_LIMIT)]
    e2 = engine()
    e2.apply(SetPhase("ACORN.LAB", PHASE_PRE_OPEN, "", 1))
    e2.apply(a.new(BUY, 0, 5, ord_type=ORD_MARKET))
    ev = e2.apply(SetPhase("ACORN.LAB", PHASE_CONTINUOUS, "", 2))
    (cancel,) = of(ev, Cancelled)
    assert "market order" in cancel.text and cancel.ord_type == ORD_MARKET


def test_market_order_in_continuous_stops_at_the_protection_band() -> None:
    e = Engine([ACORN], market_band_bps=100)  # 1% of the reference 100.00: up to 101.00
    a, b = Client("A"), Client("B")
    e.apply(b.new(SELL, 10050, 2))
    e.apply(b.new(SELL, 10100, 2))
    e.apply(b.new(SELL, 10150, 2))
    ev = e.apply(a.new(BUY, 0, 10, ord_type=ORD_MARKET))
    fills = [f for f in of(ev, Filled) if f.session == "A"]
    assert [(f.last_px, f.last_qty) for f in fills] == [(10050, 2), (10100, 2)]
    assert all(f.price == 0 and f.ord_type == ORD_MARKET for f in fills)
    (cancel,) = of(ev, Cancelled)
    assert cancel.cum_qty == 4 and "protection band" in cancel.text and cancel.ord_type == ORD_MARKET
    assert e.resting_orders == 1  # the 101.50 ask stays


def test_closed_refuses_orders_with_a_reason_and_the_close_ends_day_orders() -> None:
    e = engine()
    a = Client("A")
    e.apply(a.new(BUY, 9900, 1, tif=DAY))
    e.apply(a.new(BUY, 9800, 1, tif=GTC))
    e.apply(SetPhase("ACORN.LAB", PHASE_PRE_CLOSE, "closing call", 1))
    e.apply(a.new(BUY, 9700, 1, tif=AT_CLOSE))
    ev = e.apply(SetPhase("ACORN.LAB", PHASE_CLOSED, "close", 2))
    cancelled = {c.clordid: c.text for c in of(ev, Cancelled)}
    assert set(cancelled) == {"A-1", "A-3"} and "At the Close" in cancelled["A-3"]
    assert e.resting_orders == 1  # the GTC
    for cmd in (a.new(BUY, 9900, 1), a.new(BUY, 0, 1, ord_type=ORD_MARKET), a.new(BUY, 9900, 1, tif=AT_OPEN)):
        (rej,) = e.apply(cmd)
        assert isinstance(rej, Rejected) and rej.reason == REJ_EXCHANGE_CLOSED and "closed" in rej.text


def test_phase_refusals_say_why() -> None:
    e = engine()
    a = Client("A")
    (rej,) = e.apply(a.new(BUY, 9900, 1, tif=AT_OPEN))
    assert isinstance(rej, Rejected) and "opening call" in rej.text
    e.apply(SetPhase("ACORN.LAB", PHASE_PRE_OPEN, "", 1))
    (rej,) = e.apply(a.new(BUY, 9900, 1, tif=IOC))
    assert isinstance(rej, Rejected) and "call" in rej.text
    (rej,) = e.apply(a.new(BUY, 9900, 1, tif=AT_CLOSE))
    assert isinstance(rej, Rejected) and "closing call" in rej.text
    (acc, *_) = e.apply(a.new(BUY, 9900, 1, tif=AT_OPEN))
    assert isinstance(acc, Accepted) and acc.tif == AT_OPEN


def test_stop_is_held_until_a_trade_reaches_it_then_triggered_as_market() -> None:
    e = engine()
    a, b, c = Client("A"), Client("B"), Client("C")
    ev = e.apply(a.new(SELL, 0, 3, ord_type=ORD_STOP, stop_px=9900))
    assert of(ev, Accepted)[0].stop_px == 9900 and not of(ev, Depth)  # not in the book, not shown
    e.apply(c.new(BUY, 9800, 5))  # the liquidity the stop will take
    e.apply(b.new(BUY, 9950, 1))
    assert not of(e.apply(c.new(SELL, 9950, 1)), Triggered)  # 99.50: above the stop
    e.apply(b.new(BUY, 9900, 1))
    ev = e.apply(c.new(SELL, 9900, 1))  # a trade at 99.00: at the stop
    (trig,) = of(ev, Triggered)
    assert (trig.clordid, trig.ord_type, trig.stop_px) == ("A-1", ORD_STOP, 9900)
    after = ev[ev.index(trig):]
    fills = [f for f in of(after, Filled) if f.session == "A"]
    assert [(f.last_px, f.last_qty, f.ord_type) for f in fills] == [(9800, 3, ORD_STOP)]


def test_stop_limit_rests_as_a_limit_order_and_can_be_cancelled_while_held() -> None:
    e = engine()
    a, b = Client("A"), Client("B")
    e.apply(a.new(BUY, 10100, 2, ord_type=ORD_STOP_LIMIT, stop_px=10050))
    e.apply(a.new(BUY, 0, 2, ord_type=ORD_STOP, stop_px=10500))
    ev = e.apply(a.cancel("A-2", BUY))
    assert of(ev, Cancelled)[0].ord_type == ORD_STOP
    e.apply(b.new(SELL, 10050, 1))
    e.apply(Client("C").new(BUY, 10050, 1))  # trade at 100.50 triggers A-1
    assert e.resting_orders == 1 and e.books["ACORN.LAB"].best_bid() == 10100
    assert not e.stops


def run(e: Engine, cmds: list[Message]) -> list[Message]:
    out: list[Message] = []
    for cmd in cmds:
        out += e.apply(cmd)
    return out


def day(rng: random.Random, n: int) -> list[Message]:
    """Random orders of all types over a day of phase changes."""
    clients = [Client(f"S{i}") for i in range(4)]
    phases = [PHASE_PRE_OPEN, PHASE_CONTINUOUS, PHASE_HALTED, PHASE_CONTINUOUS, PHASE_PRE_CLOSE, PHASE_CLOSED,
              PHASE_PRE_OPEN, PHASE_CONTINUOUS]
    cmds: list[Message] = [SetPhase("*", PHASE_CLOSED, "start", 0)]
    for i in range(n):
        if i % (n // len(phases) + 1) == 0 and phases:
            cmds.append(SetPhase(rng.choice(["ACORN.LAB", "BIRCH.LAB", "*"]), phases.pop(0), "", i))
        c = rng.choice(clients)
        sym = rng.choice(["ACORN.LAB", "BIRCH.LAB"])
        ref = 10000 if sym == "ACORN.LAB" else 2500
        side = rng.choice([BUY, SELL])
        kind = rng.random()
        if kind < 0.1 and c.n:
            cmds.append(c.cancel(f"{c.session}-{rng.randint(1, c.n)}", side, sym))
        elif kind < 0.2:
            cmds.append(c.new(side, 0, rng.randint(1, 20), sym, ord_type=ORD_MARKET))
        elif kind < 0.3:
            cmds.append(c.new(side, 0, rng.randint(1, 20), sym, ord_type=ORD_STOP,
                              stop_px=ref + rng.randint(-30, 30)))
        else:
            cmds.append(c.new(side, ref + rng.randint(-20, 20), rng.randint(1, 20), sym,
                              tif=rng.choice([DAY, GTC, AT_OPEN, AT_CLOSE])))
    return cmds


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10_000), st.integers(0, 300))
def test_snapshot_anywhere_in_a_day_gives_the_same_events_after(seed: int, cut: int) -> None:
    cmds = day(random.Random(seed), 300)
    cut = min(cut, len(cmds))
    straight = engine()
    run(straight, cmds[:cut])
    snap = decode(encode(straight.snapshot("0", "1-0", 0)))
    restored = Engine.restore(snap, [ACORN, BIRCH], book_updates=True)  # type: ignore[arg-type]
    assert run(restored, cmds[cut:]) == run(straight, cmds[cut:])


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10_000))
def test_every_uncross_executes_at_one_price_that_no_order_refuses(seed: int) -> None:
    rng = random.Random(seed)
    e = engine()
    e.apply(SetPhase("ACORN.LAB", PHASE_PRE_OPEN, "", 0))
    limits: dict[str, tuple[int, int]] = {}
    clients = [Client(f"S{i}") for i in range(3)]
    for _ in range(rng.randint(1, 40)):
        c = rng.choice(clients)
        market = rng.random() < 0.1
        price = 0 if market else 10000 + rng.randint(-10, 10)
        order = c.new(rng.choice([BUY, SELL]), price, rng.randint(1, 9),
                      ord_type=ORD_MARKET if market else ORD_LIMIT)
        limits[order.clordid] = (order.side, order.price)
        e.apply(order)
    ev = e.apply(SetPhase("ACORN.LAB", PHASE_CONTINUOUS, "", 1))
    trades = of(ev, Trade)
    assert len({t.price for t in trades}) <= 1
    for f in of(ev, Filled):
        side, price = limits[f.clordid]
        assert price == 0 or (f.last_px <= price if side == BUY else f.last_px >= price)
    assert not e.books["ACORN.LAB"].is_crossed()
    assert sum(f.last_qty for f in of(ev, Filled) if f.side == BUY) == sum(t.qty for t in trades)
    assert sum(f.last_qty for f in of(ev, Filled) if f.side == SELL) == sum(t.qty for t in trades)
    assert not of(ev, BookUpdate) or of(ev, PhaseChanged)


def test_status_of_a_held_stop_says_its_type_and_stop_price() -> None:
    from shared.schema import StatusReport, StatusRequest
    e = engine()
    a = Client("A")
    e.apply(a.new(SELL, 0, 3, ord_type=ORD_STOP, stop_px=9900))
    (report,) = e.apply(StatusRequest("A", "A-1", "", "ACORN.LAB", SELL, "q", "gw", 50, 50))
    assert isinstance(report, StatusReport) and report.status == 0 and report.leaves_qty == 3
    assert (report.ord_type, report.stop_px) == (ORD_STOP, 9900)
    e.apply(a.cancel("A-1", SELL))
    (report,) = e.apply(StatusRequest("A", "A-1", "", "ACORN.LAB", SELL, "q2", "gw", 51, 51))
    assert isinstance(report, StatusReport) and report.status == 4 and report.ord_type == ORD_STOP


def test_gtc_orders_live_through_the_close_into_the_next_opening_auction() -> None:
    e = engine()
    a, b = Client("A"), Client("B")
    e.apply(a.new(BUY, 10010, 5, tif=GTC))
    e.apply(a.new(SELL, 0, 3, tif=GTC, ord_type=ORD_STOP, stop_px=9000))
    e.apply(SetPhase("ACORN.LAB", PHASE_CLOSED, "close", 1))
    assert e.resting_orders == 1 and e.stops  # the GTC order and the GTC stop stay
    (rej,) = e.apply(a.replace("A-1", BUY, 10020, 5))
    assert "closed" in rej.text  # type: ignore[attr-defined]
    e.apply(SetPhase("ACORN.LAB", PHASE_PRE_OPEN, "next day", 2))
    e.apply(b.new(SELL, 10000, 5))
    ev = e.apply(SetPhase("ACORN.LAB", PHASE_CONTINUOUS, "open", 3))
    assert [(t.price, t.qty) for t in of(ev, Trade)] == [(10000, 5)]  # the reference-closest of 100.00-100.10


def test_session_end_mass_cancel_and_end_of_day_reach_call_market_orders_and_held_stops() -> None:
    from shared.schema import EndOfDay, SessionEnded
    e = engine()
    a, b = Client("A"), Client("B")
    e.apply(SetPhase("ACORN.LAB", PHASE_HALTED, "halt", 1))
    e.apply(a.new(BUY, 0, 5, ord_type=ORD_MARKET))
    e.apply(a.new(BUY, 9900, 5))
    e.apply(b.new(SELL, 0, 2, ord_type=ORD_STOP, stop_px=9000))
    ev = e.apply(SessionEnded("A", "gw", 5))
    assert sorted(c.clordid for c in of(ev, Cancelled)) == ["A-1", "A-2"]
    assert not e.market.get("ACORN.LAB") and e.resting_orders == 0
    ev = e.apply(EndOfDay(20260101, 6))
    assert [c.clordid for c in of(ev, Cancelled)] == ["B-1"] and not e.stops


def test_a_replace_in_a_call_moves_the_indicative_and_never_trades() -> None:
    e = engine()
    a, b = Client("A"), Client("B")
    e.apply(SetPhase("ACORN.LAB", PHASE_PRE_CLOSE, "closing call", 1))
    e.apply(a.new(BUY, 9990, 5))
    e.apply(b.new(SELL, 10000, 5))
    ev = e.apply(a.replace("A-1", BUY, 10000, 5))
    assert not of(ev, Filled) and of(ev, Indicative)[0].volume == 5
    ev = e.apply(SetPhase("ACORN.LAB", PHASE_CLOSED, "close", 9))
    assert [(t.price, t.qty) for t in of(ev, Trade)] == [(10000, 5)]
    assert of(ev, PhaseChanged)[0].phase == PHASE_CLOSED


def test_a_triggered_stop_limit_resting_reports_its_type_when_it_is_hit() -> None:
    e = engine()
    a, b, c = Client("A"), Client("B"), Client("C")
    e.apply(a.new(BUY, 10010, 4, ord_type=ORD_STOP_LIMIT, stop_px=10050))
    e.apply(b.new(SELL, 10050, 1))
    e.apply(c.new(BUY, 10050, 1))  # triggers A-1: rests at 100.10 (nothing to buy there)
    ev = e.apply(b.new(SELL, 10010, 3))
    (made,) = [f for f in of(ev, Filled) if f.session == "A"]
    assert (made.last_qty, made.ord_type, made.stop_px) == (3, ORD_STOP_LIMIT, 10050)
    assert [f.ord_type for f in of(ev, Filled) if f.session == "B"] == [ORD_LIMIT]


def test_a_book_image_restates_the_phase_and_indicative_of_each_instrument_in_a_call() -> None:
    """A gateway that starts mid-call reads the BookImages it asked for, then each instrument's phase
    (a PhaseChanged repeating it) and its last Indicative; instruments in continuous trading: none."""
    e = engine()
    a, b = Client("A"), Client("B")
    e.apply(SetPhase("ACORN.LAB", PHASE_PRE_OPEN, "open call", 1))
    e.apply(a.new(BUY, 10100, 10))
    e.apply(b.new(SELL, 10000, 4))
    ev = e.apply(ImageRequest("gw2", 7))
    kinds = [type(m).__name__ for m in ev]
    assert kinds == ["BookImage", "BookImage", "PhaseChanged", "Indicative"]
    assert of(ev, PhaseChanged) == [PhaseChanged("ACORN.LAB", PHASE_PRE_OPEN, PHASE_PRE_OPEN, RESTATED, 7)]
    assert of(ev, Indicative) == [Indicative("ACORN.LAB", 10100, 4, 6, BUY, 7)]
    e.apply(SetPhase("ACORN.LAB", PHASE_CONTINUOUS, "open", 8))
    assert [type(m).__name__ for m in e.apply(ImageRequest("gw2", 9))] == ["BookImage", "BookImage"]
    e.apply(SetPhase("BIRCH.LAB", PHASE_CLOSED, "closed", 10))  # not a call: a phase, no Indicative
    assert [(p.symbol, p.phase) for p in of(e.apply(ImageRequest("gw2", 11)), PhaseChanged)] == [
        ("BIRCH.LAB", PHASE_CLOSED)]
