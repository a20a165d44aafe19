"""The liquidity bots' ladder: both sides, inside the band, interleaved, within the order limit."""

from __future__ import annotations

from services.bots.ladder import ladder, levels_per_side, missing, spacing_ticks
from shared.config import common_settings
from shared.schema import BUY, SELL

INSTRUMENTS = common_settings({"REDIS_URL": "redis://127.0.0.1:1/0"}).instruments


def test_levels_fit_the_open_order_limit() -> None:
    assert levels_per_side(2, 20, 3) == 3
    assert levels_per_side(2, 20, 10) == 5  # 2 instruments x 2 sides x 5 = 20
    assert levels_per_side(11, 20, 3) == 0


def test_ladder_has_both_sides_below_and_above_the_reference() -> None:
    plan = ladder(INSTRUMENTS, 0, 2, 3)
    assert len(plan) == 12
    for inst in INSTRUMENTS:
        low, high = inst.band_ticks
        bids = [q.price_ticks for q in plan if q.symbol == inst.symbol and q.side == BUY]
        asks = [q.price_ticks for q in plan if q.symbol == inst.symbol and q.side == SELL]
        assert len(bids) == len(asks) == 3
        assert max(bids) < inst.reference_ticks < min(asks)
        assert low <= min(bids) and max(asks) <= high


def test_bots_interleave_and_never_cross() -> None:
    a = {(q.symbol, q.side, q.price_ticks) for q in ladder(INSTRUMENTS, 0, 2, 3)}
    b = {(q.symbol, q.side, q.price_ticks) for q in ladder(INSTRUMENTS, 1, 2, 3)}
    assert not a & b
    for inst in INSTRUMENTS:
        best_bid = max(p for s, side, p in a | b if s == inst.symbol and side == BUY)
        best_ask = min(p for s, side, p in a | b if s == inst.symbol and side == SELL)
        assert best_bid < best_ask
        assert best_ask - best_bid == 2 * spacing_ticks(inst)


def test_missing_levels_only() -> None:
    plan = ladder(INSTRUMENTS, 0, 1, 2)
    first = plan[0]
    todo = missing(plan, {(first.symbol, first.side, first.price_ticks)})
    assert first not in todo and len(todo) == len(plan) - 1
