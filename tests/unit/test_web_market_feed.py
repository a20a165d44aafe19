"""The market feed's conflation: what a page would replace before anyone sees it is skipped."""

from __future__ import annotations

from services.web.hub import _latest
from shared.schema import Depth, Trade


def depth(symbol: str, bid: int) -> Depth:
    return Depth(symbol, ((bid, 1, 1),), (), bid)


def trade(n: int) -> Trade:
    return Trade("ACORN.LAB", 10_000, 1, f"M{n}", 1, n)


def test_each_books_last_depth_and_the_last_trades_in_order() -> None:
    msgs = [trade(1), depth("ACORN.LAB", 1), trade(2), depth("BIRCH.LAB", 5), trade(3),
            depth("ACORN.LAB", 2), trade(4)]
    assert _latest(msgs, 2) == [depth("BIRCH.LAB", 5), trade(3), depth("ACORN.LAB", 2), trade(4)]


def test_nothing_is_skipped_when_nothing_is_replaced() -> None:
    msgs = [trade(1), depth("ACORN.LAB", 1), trade(2), depth("BIRCH.LAB", 5)]
    assert _latest(msgs, 50) == msgs
    assert _latest([], 50) == []
