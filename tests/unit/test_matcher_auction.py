"""The uncross price: each tie-break rule on a hand-made book, and a brute-force reference over
random order sets (every candidate price evaluated from the orders themselves)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from services.matcher.auction import NO_CROSS, Uncross, uncross_price
from shared.schema import BUY, SELL


def test_max_volume_wins() -> None:
    # demand at 100: 10+5, at 101: 5; supply at 100: 8, at 101: 8+20
    u = uncross_price([(100, 10), (101, 5)], [(100, 8), (101, 20)], 0, 0, 100)
    assert (u.price, u.volume) == (100, 8)
    assert (u.imbalance_qty, u.imbalance_side) == (7, BUY)


def test_nothing_crosses() -> None:
    assert uncross_price([(99, 10)], [(100, 10)], 0, 0, 100) == NO_CROSS
    assert uncross_price([], [(100, 10)], 0, 0, 100) == NO_CROSS
    assert uncross_price([], [], 5, 0, 100) == NO_CROSS


def test_same_volume_smallest_surplus_wins() -> None:
    # at 100: demand 10, supply 6 -> 6, surplus 4; at 101: demand 6 (the 6 at 101), supply 6+3 -> 6, surplus 3
    u = uncross_price([(100, 4), (101, 6)], [(100, 6), (101, 3)], 0, 0, 100)
    assert (u.price, u.volume, u.imbalance_qty, u.imbalance_side) == (101, 6, 3, SELL)


def test_buy_pressure_takes_the_highest_price() -> None:
    # bids 10 at 102; asks 5 at 100 and... candidates 100, 101, 102 all volume 5 surplus +5
    u = uncross_price([(102, 10)], [(100, 5)], 0, 0, 100)
    assert u.volume == 5 and u.imbalance_side == BUY and u.price == 102


def test_sell_pressure_takes_the_lowest_price() -> None:
    u = uncross_price([(102, 5)], [(100, 10)], 0, 0, 102)
    assert u.volume == 5 and u.imbalance_side == SELL and u.price == 100


def test_no_surplus_the_reference_decides() -> None:
    # demand 5 at 98..104, supply 5 at 98..104: candidates 98 and 104, surplus 0 at both
    for ref, want in ((99, 98), (103, 104), (101, 98), (110, 104)):
        u = uncross_price([(104, 5)], [(98, 5)], 0, 0, ref)
        assert (u.price, u.volume, u.imbalance_side) == (want, 5, 0), ref


def test_surplus_on_both_sides_the_reference_decides() -> None:
    # at 100: demand 10, supply 5 (+5 buy); at 101: demand 5, supply 10 (-5 sell): same volume, |surplus|
    bids, asks = [(100, 5), (101, 5)], [(100, 5), (101, 5)]
    assert uncross_price(bids, asks, 0, 0, 100).price == 100
    assert uncross_price(bids, asks, 0, 0, 101).price == 101


def test_market_orders_count_at_every_price() -> None:
    u = uncross_price([], [(100, 4), (103, 10)], 6, 0, 100)
    assert (u.price, u.volume, u.imbalance_qty, u.imbalance_side) == (103, 6, 8, SELL)
    only_market = uncross_price([], [], 7, 3, 12345)
    assert only_market == Uncross(12345, 3, 4, BUY)


# ---------------------------------------------------------------- brute force

def _reference(bids: list[tuple[int, int]], asks: list[tuple[int, int]], mb: int, ms: int,
               ref: int) -> Uncross:
    """Every candidate price evaluated from the orders, then the rules applied literally."""
    candidates = sorted({p for p, _ in bids} | {p for p, _ in asks})
    if not candidates:
        v = min(mb, ms)
        if not v:
            return NO_CROSS
        s = mb - ms
        return Uncross(ref, v, abs(s), BUY if s > 0 else SELL if s < 0 else 0)
    rows = []
    for p in candidates:
        demand = mb + sum(q for bp, q in bids if bp >= p)
        supply = ms + sum(q for ap, q in asks if ap <= p)
        rows.append((p, min(demand, supply), demand - supply))
    vmax = max(v for _, v, _ in rows)
    if vmax == 0:
        return NO_CROSS
    rows = [r for r in rows if r[1] == vmax]
    smin = min(abs(s) for _, _, s in rows)
    rows = [r for r in rows if abs(r[2]) == smin]
    if len(rows) == 1:
        p, v, s = rows[0]
    elif all(s > 0 for _, _, s in rows):
        p, v, s = max(rows)
    elif all(s < 0 for _, _, s in rows):
        p, v, s = min(rows)
    else:
        p, v, s = min(rows, key=lambda r: (abs(r[0] - ref), r[0]))
    return Uncross(p, v, abs(s), BUY if s > 0 else SELL if s < 0 else 0)


orders = st.lists(st.tuples(st.integers(95, 105), st.integers(1, 20)), max_size=25)


@settings(max_examples=400, deadline=None)
@given(orders, orders, st.integers(0, 30), st.integers(0, 30), st.integers(90, 110))
def test_uncross_is_the_brute_force_one(bids: list[tuple[int, int]], asks: list[tuple[int, int]], mb: int,
                                        ms: int, ref: int) -> None:
    assert uncross_price(bids, asks, mb, ms, ref) == _reference(bids, asks, mb, ms, ref)
