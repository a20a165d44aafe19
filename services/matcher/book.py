"""One instrument's limit order book: price-time priority, or pro-rata per level.

A plain class with no I/O. ``match`` trades an incoming order against the opposite side, best
price first; each trade happens at the resting order's price. At one price the oldest order
trades first (FIFO) or, for a pro-rata instrument, the level is shared out by ``prorata.allocate``.
The book updates the resting orders it trades with (and drops those that are done); the caller
owns the incoming order and everything about sessions and events.

Market data: every change to a level records its price in ``touched_bids``/``touched_asks`` (one set
insertion, the only cost on the hot path); ``changes`` turns them into the levels' new states against
what was last shown (``shown_bids``/``shown_asks``), so a batch reports each level's net change once.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import Any

from sortedcontainers import SortedList

from services.matcher.prorata import allocate
from shared.config import Instrument
from shared.schema import BUY, ORD_LIMIT, SELL, STP_CANCEL_AGGRESSOR, STP_CANCEL_RESTING

Fill = tuple["Order", int, int]  # (resting order, quantity, price)
IN_BOOK, IN_MARKET, HELD = 0, 1, 2  # where an order waits: the book, a call's market orders, held stops
NO_BID = -(1 << 62)  # bid_top of an empty side: every price is above it
NO_ASK = 1 << 62
DepthSide = tuple[tuple[int, int, int], ...]  # ((price, quantity, orders), ...) best first
LevelChange = tuple[int, int, int, int]  # (side, price, quantity, orders); quantity 0: the level is gone


class Order:
    """An order the exchange accepted. ``cost`` is sum(fill price * fill qty), in ticks."""

    __slots__ = ("clordid", "cost", "cum", "leaves", "order_id", "owner", "price", "qty", "reply_to",
                 "session", "side", "stp", "symbol", "tif")

    def __init__(self, order_id: str, session: str, clordid: str, symbol: str, side: int, price: int,
                 qty: int, tif: int, reply_to: str, owner: Any = None, leaves: int | None = None,
                 cum: int = 0, cost: int = 0, stp: int = 0) -> None:
        self.order_id = order_id
        self.session = session
        self.clordid = clordid
        self.symbol = symbol
        self.side = side
        self.price = price
        self.qty = qty
        self.leaves = qty if leaves is None else leaves
        self.cum = cum
        self.cost = cost
        self.tif = tif
        self.reply_to = reply_to
        self.stp = stp  # self-trade prevention when it trades as an aggressor again (a replace)
        self.owner = owner  # the engine's per-session state; the book never looks at it

    # What every plain order is; a SpecialOrder has them as slots of its own (no cost to an Order).
    ord_type = ORD_LIMIT
    stop_px = 0
    where = IN_BOOK

    def __repr__(self) -> str:
        side = "buy" if self.side == BUY else "sell"
        return (f"Order({self.order_id} {self.session}/{self.clordid} {side} {self.leaves}/{self.qty}"
                f"@{self.price} cum={self.cum})")


class SpecialOrder(Order):
    """A market, stop or stop-limit order (OrdType 40 other than limit): where it waits (``where``:
    IN_BOOK, or the engine's market list of a call, or its held stops) and its type for the reports."""

    __slots__ = ("ord_type", "stop_px", "where")

    def __init__(self, *args: Any, ord_type: int, stop_px: int, where: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.ord_type = ord_type
        self.stop_px = stop_px
        self.where = where


class Level(deque["Order"]):
    """The orders resting at one price, oldest first (the level is that deque), and their total
    leaves quantity.

    A deque subclass with no ``__init__`` of its own: the reference workload opens and empties a
    level for every other order, and this builds one in about a third of the time.
    """

    __slots__ = ("price", "qty")

    price: int
    qty: int


def _level(price: int) -> Level:
    level = Level()
    level.price = price
    level.qty = 0
    return level


class Book:
    """Bids and asks of one instrument."""

    __slots__ = ("ask_prices", "ask_top", "asks", "bid_prices", "bid_top", "bids", "instrument", "pro_rata",
                 "resting", "shown_asks", "shown_bids", "symbol", "touched_asks", "touched_bids")

    def __init__(self, instrument: Instrument) -> None:
        self.instrument = instrument
        self.symbol = instrument.symbol
        self.pro_rata = instrument.pro_rata
        # Each side: price -> Level, plus its prices ascending in a sortedcontainers SortedList (best
        # bid last, best ask first). Measured side by side, a plain list with bisect/insort was ~10%
        # faster on the deep book (a side holds at most the band's few thousand prices); we keep the
        # library the project chose, and the cached best prices below keep it off the hot path.
        self.bids: dict[int, Level] = {}
        self.asks: dict[int, Level] = {}
        self.bid_prices: SortedList = SortedList()
        self.ask_prices: SortedList = SortedList()
        # The best prices, kept up to date: the hot path asks "does it cross?" for every order.
        self.bid_top = NO_BID
        self.ask_top = NO_ASK
        self.resting = 0
        # Prices whose level changed since the last ``changes`` (or ``forget_changes``), and each
        # level as market data last showed it: price -> (quantity, orders).
        self.touched_bids: set[int] = set()
        self.touched_asks: set[int] = set()
        self.shown_bids: dict[int, tuple[int, int]] = {}
        self.shown_asks: dict[int, tuple[int, int]] = {}

    # ------------------------------------------------------------------ queries

    def best_bid(self) -> int | None:
        return self.bid_prices[-1] if self.bid_prices else None

    def best_ask(self) -> int | None:
        return self.ask_prices[0] if self.ask_prices else None

    def crosses(self, side: int, price: int) -> bool:
        """Would an order of ``side`` at ``price`` trade now?"""
        return price >= self.ask_top if side == BUY else price <= self.bid_top

    def levels(self, side: int) -> Iterator[Level]:
        """The levels of one side, best price first."""
        if side == BUY:
            bids = self.bids
            return (bids[p] for p in reversed(self.bid_prices))
        asks = self.asks
        return (asks[p] for p in self.ask_prices)

    def orders(self) -> Iterator[Order]:
        """Every resting order: bids then asks, best price first, oldest first within a price."""
        for side in (BUY, SELL):
            for level in self.levels(side):
                yield from level

    def depth(self, n: int) -> tuple[DepthSide, DepthSide]:
        """The best ``n`` levels of each side as (price, quantity, orders)."""
        bids, asks = self.bids, self.asks
        out_bids = []
        bid_prices = self.bid_prices
        for p in reversed(bid_prices[max(0, len(bid_prices) - n):]):
            level = bids[p]
            out_bids.append((p, level.qty, len(level)))
        out_asks = []
        for p in self.ask_prices[:n]:
            level = asks[p]
            out_asks.append((p, level.qty, len(level)))
        return tuple(out_bids), tuple(out_asks)

    def image(self) -> tuple[DepthSide, DepthSide]:
        """Every level of each side as (price, quantity, orders), best first."""
        return self.depth(max(len(self.bid_prices), len(self.ask_prices)))

    # ------------------------------------------------------------------ market data

    def changes(self) -> tuple[LevelChange, ...]:
        """The levels touched since the last call whose state differs from what was last shown, at
        their new state (bids then asks, best first; quantity 0 when the level is gone). They are
        shown from now on.

        A level that appeared and vanished between two calls, or came back to the state shown, is
        left out: a subscriber holding the shown book ends with exactly this book.
        """
        out: list[LevelChange] = []
        for side, touched, levels, shown in ((BUY, self.touched_bids, self.bids, self.shown_bids),
                                             (SELL, self.touched_asks, self.asks, self.shown_asks)):
            if not touched:
                continue
            for price in sorted(touched, reverse=side == BUY):
                level = levels.get(price)
                if level is None:
                    if shown.pop(price, None) is not None:
                        out.append((side, price, 0, 0))
                    continue
                now = (level.qty, len(level))
                if shown.get(price) != now:
                    shown[price] = now
                    out.append((side, price, *now))
            touched.clear()
        return tuple(out)

    def forget_changes(self) -> None:
        """Drop the touched prices without showing them (no market data wanted)."""
        self.touched_bids.clear()
        self.touched_asks.clear()

    def show_all(self) -> None:
        """Take the book as it is now as shown (a restored engine: subscribers hold this book)."""
        self.shown_bids = {p: (level.qty, len(level)) for p, level in self.bids.items()}
        self.shown_asks = {p: (level.qty, len(level)) for p, level in self.asks.items()}
        self.forget_changes()

    # ------------------------------------------------------------------ changes

    def add(self, order: Order) -> None:
        """Rest ``order`` at the back of its price level."""
        price = order.price
        if order.side == BUY:
            level = self.bids.get(price)
            if level is None:
                level = self.bids[price] = _level(price)
                self.bid_prices.add(price)
                if price > self.bid_top:
                    self.bid_top = price
            self.touched_bids.add(price)
        else:
            level = self.asks.get(price)
            if level is None:
                level = self.asks[price] = _level(price)
                self.ask_prices.add(price)
                if price < self.ask_top:
                    self.ask_top = price
            self.touched_asks.add(price)
        level.append(order)
        level.qty += order.leaves
        self.resting += 1

    def remove(self, order: Order) -> None:
        """Take a resting order out of the book (cancel, or a replace that loses priority)."""
        if order.side == BUY:
            levels, prices = self.bids, self.bid_prices
            self.touched_bids.add(order.price)
        else:
            levels, prices = self.asks, self.ask_prices
            self.touched_asks.add(order.price)
        level = levels[order.price]
        level.remove(order)  # identity comparison: Order defines no __eq__
        level.qty -= order.leaves
        self.resting -= 1
        if not level:
            del levels[order.price]
            prices.remove(order.price)
            if order.side == BUY:
                self.bid_top = prices[-1] if prices else NO_BID
            else:
                self.ask_top = prices[0] if prices else NO_ASK

    def reduce(self, order: Order, leaves: int) -> None:
        """Lower a resting order's leaves in place: it keeps its time priority."""
        if order.side == BUY:
            level = self.bids[order.price]
            self.touched_bids.add(order.price)
        else:
            level = self.asks[order.price]
            self.touched_asks.add(order.price)
        level.qty -= order.leaves - leaves
        order.leaves = leaves

    def match(self, side: int, limit: int, qty: int) -> list[Fill]:
        """Trade an incoming ``side`` order of ``qty`` at limit ``limit``; return the fills in order.

        Resting orders that trade are updated (leaves, cum, cost); those with nothing left leave the
        book. The incoming order is the caller's to update (sum of the fills' quantities).
        """
        fills: list[Fill] = []
        if side == BUY:
            prices, levels = self.ask_prices, self.asks
            px = self.ask_top
            best = 0  # asks: the best price is the list's first
            touched = self.touched_asks
        else:
            prices, levels = self.bid_prices, self.bids
            px = self.bid_top
            best = -1
            touched = self.touched_bids
        append = fills.append
        pro_rata = self.pro_rata
        resting = self.resting
        while qty:
            if (px > limit) if best == 0 else (px < limit):  # also when the side is empty
                break
            level = levels[px]
            touched.add(px)
            orders = level
            if pro_rata and qty < level.qty:
                self.resting = resting
                qty = self._take_prorata(level, qty, fills)
                resting = self.resting
            else:
                # FIFO (inlined: the hot path); a pro-rata level that trades whole is the same.
                taken = 0
                while qty and orders:
                    maker = orders[0]
                    leaves = maker.leaves
                    if leaves <= qty:
                        take = leaves
                        orders.popleft()
                        resting -= 1
                    else:
                        take = qty
                    maker.leaves = leaves - take
                    maker.cum += take
                    maker.cost += take * px
                    qty -= take
                    taken += take
                    append((maker, take, px))
                level.qty -= taken
            if orders:
                break  # qty is 0: the level still has orders
            del levels[px]
            prices.pop(best)
            if best == 0:
                px = self.ask_top = prices[0] if prices else NO_ASK
            else:
                px = self.bid_top = prices[-1] if prices else NO_BID
        self.resting = resting
        return fills

    def fillable(self, side: int, limit: int, qty: int, session: str = "", stp: int = 0) -> int:
        """How much of ``qty`` an incoming order would trade now (at most ``qty``), changing nothing.

        With ``stp`` (self-trade prevention, an STP_* mode) and the order's ``session``, as
        ``match_stp`` would trade: a resting order of the same session is skipped (cancel resting)
        or ends the matching (cancel aggressor or both).
        """
        avail = 0
        for level in self.levels(SELL if side == BUY else BUY):
            if (level.price > limit) if side == BUY else (level.price < limit):
                break
            if not stp:
                avail += level.qty
            elif self.pro_rata:
                # A pro-rata level is shared among all its orders: an own order anywhere in it counts.
                own = [o for o in level if o.session == session]
                if own and stp != STP_CANCEL_RESTING:
                    break
                avail += level.qty - sum(o.leaves for o in own)
            else:
                for o in level:
                    if o.session == session:
                        if stp != STP_CANCEL_RESTING:
                            return min(avail, qty)
                        continue
                    avail += o.leaves
                    if avail >= qty:
                        return qty
            if avail >= qty:
                return qty
        return avail

    def match_stp(self, side: int, limit: int, qty: int, session: str,
                  stp: int) -> tuple[list[Fill], Order | None]:
        """``match`` with self-trade prevention ``stp`` (an STP_* mode other than off) for ``session``.

        A resting order of the same session that the incoming order meets (price-time: the next one
        in turn; pro-rata: any order of the level it is about to share) is a self-trade. Cancel
        resting: it leaves the book (an entry with quantity 0 in the result, in turn with the fills)
        and matching goes on. Cancel aggressor: matching stops before it. Cancel both: it leaves the
        book and matching stops. Returns the entries and the resting order that stopped the
        incoming one (None if it was not stopped).
        """
        out: list[Fill] = []
        buy = side == BUY
        levels = self.asks if buy else self.bids
        pro_rata = self.pro_rata
        while qty:
            px = self.ask_top if buy else self.bid_top
            if (px > limit) if buy else (px < limit):  # also when the side is empty
                break
            level = levels[px]
            own = [o for o in level if o.session == session]
            if own and (pro_rata or level[0].session == session):
                met = own if pro_rata else [level[0]]
                if stp != STP_CANCEL_AGGRESSOR:
                    for o in met:
                        self.remove(o)
                        out.append((o, 0, px))
                if stp != STP_CANCEL_RESTING:
                    return out, met[0]
                continue
            take = qty
            if own:  # price-time: trade only the orders ahead of the first own order
                ahead = 0
                for o in level:
                    if o is own[0]:
                        break
                    ahead += o.leaves
                take = min(qty, ahead)
            fills = self.match(side, px, take)  # limit px: this level only
            out += fills
            qty -= sum(f[1] for f in fills)
        return out, None

    def _take_prorata(self, level: Level, qty: int, fills: list[Fill]) -> int:
        # Only for part of a level: a level that trades whole fills every order in full, which
        # ``match`` does on its FIFO path.
        makers = list(level)
        px = level.price
        shares = allocate(qty, [m.leaves for m in makers])
        taken = 0
        for maker, take in zip(makers, shares, strict=True):
            if take:
                maker.leaves -= take
                maker.cum += take
                maker.cost += take * px
                taken += take
                fills.append((maker, take, px))
        if any(m.leaves == 0 for m in makers):
            level.clear()
            level.extend(m for m in makers if m.leaves)
            self.resting -= len(makers) - len(level)
        level.qty -= taken
        return qty - taken

    def is_crossed(self) -> bool:
        bid, ask = self.best_bid(), self.best_ask()
        return bid is not None and ask is not None and bid >= ask
