"""The uncross of a call: the one price a call book executes at, and how much it executes.

Pure functions, no book and no events (the engine walks the orders). The rule is the one the large
European venues publish (Xetra, Euronext):

1. the price that executes the most volume (``min(demand, supply)``);
2. ties: the smallest surplus ``|demand - supply|``;
3. ties: market pressure: when every remaining price leaves its surplus on the buy side, the
   highest of them; when every one leaves it on the sell side, the lowest;
4. otherwise (surplus on both sides, or none): the price closest to the reference price (the last
   trade price, else the instrument's reference); two equally close: the lower one.

Candidate prices are the limit prices in the book. A market order counts at every price (a buy in
the demand, a sell in the supply of each candidate). A book with market orders only on both sides
(no limit price) uncrosses at the reference price.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from shared.schema import BUY, SELL

# One side's limit quantities: (price, qty) in any order, prices may repeat.
Quantities = Sequence[tuple[int, int]]


@dataclass(frozen=True, slots=True)
class Uncross:
    """An uncross price (0: nothing crosses), the volume executed and the surplus left."""

    price: int
    volume: int
    imbalance_qty: int
    imbalance_side: int  # 0 none, BUY or SELL


NO_CROSS = Uncross(0, 0, 0, 0)


def uncross_price(bids: Quantities, asks: Quantities, market_buy: int, market_sell: int,
                  reference: int) -> Uncross:
    """The uncross of a call book: its price, volume and the surplus at that price.

    ``bids``/``asks``: each limit order's (price, leaves), or per-level totals; ``market_buy`` and
    ``market_sell``: the market orders' total quantity; ``reference``: the reference price.
    """
    buy_at: dict[int, int] = {}
    for p, q in bids:
        buy_at[p] = buy_at.get(p, 0) + q
    sell_at: dict[int, int] = {}
    for p, q in asks:
        sell_at[p] = sell_at.get(p, 0) + q
    prices = sorted(buy_at.keys() | sell_at.keys())
    if not prices:
        if market_buy and market_sell:
            volume = min(market_buy, market_sell)
            return _result(reference, volume, market_buy - market_sell)
        return NO_CROSS
    # demand(p): market buys + bids at p or above; supply(p): market sells + asks at p or below.
    n = len(prices)
    demand = [0] * n
    acc = market_buy
    for i in range(n - 1, -1, -1):
        acc += buy_at.get(prices[i], 0)
        demand[i] = acc
    best: list[tuple[int, int]] = []  # (price, signed surplus) at the best (volume, |surplus|)
    best_volume = 0
    best_abs = 0
    acc = market_sell
    for i, p in enumerate(prices):
        acc += sell_at.get(p, 0)
        volume = demand[i] if demand[i] < acc else acc
        if volume <= 0 or volume < best_volume:
            continue
        surplus = demand[i] - acc
        a = surplus if surplus >= 0 else -surplus
        if volume > best_volume or a < best_abs:
            best_volume, best_abs, best = volume, a, [(p, surplus)]
        elif a == best_abs:
            best.append((p, surplus))
    if not best:
        return NO_CROSS
    return _result(_tie_break(best, reference), best_volume, _surplus_at(best, _tie_break(best, reference)))


def _tie_break(best: list[tuple[int, int]], reference: int) -> int:
    if len(best) == 1:
        return best[0][0]
    if all(s > 0 for _, s in best):
        return best[-1][0]  # buy pressure: the highest price
    if all(s < 0 for _, s in best):
        return best[0][0]  # sell pressure: the lowest price
    return min(best, key=lambda ps: (abs(ps[0] - reference), ps[0]))[0]


def _surplus_at(best: list[tuple[int, int]], price: int) -> int:
    return next(s for p, s in best if p == price)


def _result(price: int, volume: int, surplus: int) -> Uncross:
    if surplus > 0:
        return Uncross(price, volume, surplus, BUY)
    if surplus < 0:
        return Uncross(price, volume, -surplus, SELL)
    return Uncross(price, volume, 0, 0)
