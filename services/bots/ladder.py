"""The liquidity bots' plan: a small ladder of limit orders around each reference price. Pure.

Bot ``k`` of ``n`` quotes level ``j`` at ``reference -/+ spacing * (1 + j * n + k)``: the bots'
levels interleave, bids stay below and asks above the reference, so bots never trade with each
other and the book always has both sides.
"""

from __future__ import annotations

from dataclasses import dataclass

from shared.config import Instrument
from shared.schema import BUY, SELL


@dataclass(frozen=True, slots=True)
class Quote:
    symbol: str
    side: int
    price_ticks: int
    qty: int


def spacing_ticks(inst: Instrument) -> int:
    """A tenth of a percent of the reference price, at least one tick."""
    return max(1, inst.reference_ticks // 1000)


def levels_per_side(instruments: int, max_open: int, wanted: int) -> int:
    """As many levels as ``wanted`` while both sides of every instrument fit in ``max_open``."""
    return max(0, min(wanted, max_open // max(1, 2 * instruments)))


def ladder(instruments: tuple[Instrument, ...], bot: int, bots: int, levels: int,
           base_qty: int = 10) -> list[Quote]:
    """Every quote bot ``bot`` (0-based) of ``bots`` keeps resting."""
    out = []
    for inst in instruments:
        step = spacing_ticks(inst)
        low, high = inst.band_ticks
        for j in range(levels):
            offset = step * (1 + j * bots + bot)
            qty = base_qty * (j + 1)
            bid, ask = inst.reference_ticks - offset, inst.reference_ticks + offset
            if bid >= low:
                out.append(Quote(inst.symbol, BUY, bid, qty))
            if ask <= high:
                out.append(Quote(inst.symbol, SELL, ask, qty))
    return out


def missing(plan: list[Quote], resting: set[tuple[str, int, int]]) -> list[Quote]:
    """The quotes of ``plan`` with no order resting at their (symbol, side, price)."""
    return [q for q in plan if (q.symbol, q.side, q.price_ticks) not in resting]
