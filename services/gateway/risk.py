"""Pre-trade risk: limits per session and per firm, checked on the way in, kept up to date from the
order events on the way out. Pure: no QuickFIX, no Redis, no clock.

Why the gateway: a session's orders span matcher shards (one per instrument group), and only the
gateway that holds the session sees all of them, in and out.

Limits (all optional; none set, nothing is checked and nothing is kept: today's behaviour):

- ``MaxOrderQty``: an order's quantity (38).
- ``MaxOrderValue``: an order's price times quantity, in the currency of prices.
- ``MaxOpenValue``: the value of every open order (leaves times price) plus this one's.
- ``MaxPosition``: per instrument, the net filled position plus every open order on the order's side
  plus this one (the worst case if they all fill), in absolute value.
- ``PriceCollar``: a percentage (``5%`` or ``5``): a buy above, or a sell below, the last trade of
  the instrument by more than that is refused (no last trade yet: no collar).

A session's limits apply to its own orders and open orders; a firm's (``[FIRM]`` in the sessions
file) to the sum of its sessions' on this gateway. A breach is answered with an ExecutionReport
Rejected, OrdRejReason 103=3 (Order exceeds limit) and a Text naming the limit.

An order without a limit price (a market or a stop order) is valued at its StopPx (99), else at the
instrument's last trade; before the first trade it cannot be valued and a session or firm with
MaxOrderValue or MaxOpenValue refuses it (MaxOrderQty and MaxPosition need no price). The collar
applies to limit prices (44) only: a stop's trigger is through the market by design.

An order that passes is counted at once (before the matcher accepts it), so a burst cannot pass a
limit between its orders' accepts; a Rejected for it gives its room back. Values are integers in
units of 1e-6 of the price currency (``MICRO``), so the hot path does integer arithmetic only.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation

from shared.config import ConfigError, Instrument
from shared.schema import (
    BUY,
    REJ_ORDER_EXCEEDS_LIMIT,
    Accepted,
    Cancelled,
    Filled,
    Message,
    Refused,
    Rejected,
    Replaced,
)

MICRO = 1_000_000
REJECT_REASON = REJ_ORDER_EXCEEDS_LIMIT  # OrdRejReason 103=3: Order exceeds limit
LIMIT_KEYS = ("MaxOrderQty", "MaxOrderValue", "MaxOpenValue", "MaxPosition", "PriceCollar")


@dataclass(frozen=True, slots=True)
class Limits:
    """One account's limits; None: not limited. Values in MICRO units, the collar in basis points."""

    max_order_qty: int | None = None
    max_order_value: int | None = None
    max_open_value: int | None = None
    max_position: int | None = None
    collar_bp: int | None = None

    @property
    def any(self) -> bool:
        return any(v is not None for v in (self.max_order_qty, self.max_order_value, self.max_open_value,
                                           self.max_position, self.collar_bp))


NO_LIMITS = Limits()


def _whole(raw: str, key: str, where: str) -> int:
    if not raw.isdigit() or int(raw) < 1:
        raise ConfigError(f"{where}: {key}={raw!r} must be a whole number of at least 1")
    return int(raw)


def _money(raw: str, key: str, where: str) -> int:
    try:
        value = Decimal(raw)
    except InvalidOperation:
        value = Decimal("NaN")
    if not value.is_finite() or value <= 0:
        raise ConfigError(f"{where}: {key}={raw!r} must be a positive amount")
    return int(value * MICRO)


def parse_limits(values: dict[str, str], where: str) -> Limits:
    """Pop the limit keys (LIMIT_KEYS) out of a section's ``values``; fail fast on a bad one."""
    qty = values.pop("MaxOrderQty", None)
    order_value = values.pop("MaxOrderValue", None)
    open_value = values.pop("MaxOpenValue", None)
    position = values.pop("MaxPosition", None)
    collar = values.pop("PriceCollar", None)
    collar_bp = None
    if collar is not None:
        try:
            pct = Decimal(collar.rstrip("%").strip())
        except InvalidOperation:
            pct = Decimal("NaN")
        if not pct.is_finite() or pct <= 0 or pct >= 100:
            raise ConfigError(f"{where}: PriceCollar={collar!r} must be a percentage above 0 and below 100")
        collar_bp = int(pct * 100)
    return Limits(
        max_order_qty=None if qty is None else _whole(qty, "MaxOrderQty", where),
        max_order_value=None if order_value is None else _money(order_value, "MaxOrderValue", where),
        max_open_value=None if open_value is None else _money(open_value, "MaxOpenValue", where),
        max_position=None if position is None else _whole(position, "MaxPosition", where),
        collar_bp=collar_bp,
    )


def _fmt(micro: int) -> str:
    return format((Decimal(micro) / MICRO).normalize(), "f")


@dataclass(slots=True)
class _Order:
    account: tuple[str, ...]  # the session, and its firm if it has one
    symbol: str
    side: int
    price: int  # ticks
    leaves: int
    accepted: bool = False


@dataclass(slots=True)
class _Exposure:
    open_value: int = 0  # MICRO
    position: dict[str, int] = field(default_factory=dict)  # net filled, buys positive
    open_buy: dict[str, int] = field(default_factory=dict)
    open_sell: dict[str, int] = field(default_factory=dict)


class RiskBook:
    """The limits of the sessions and firms that have some, and their open orders and positions.

    ``check`` runs on the engine thread, ``on_event`` on the events thread: one lock, taken only for
    sessions with limits (``watched``).
    """

    def __init__(self, instruments: Iterable[Instrument], sessions: Mapping[str, Limits],
                 firms: Mapping[str, Limits], firm_of: Mapping[str, str]) -> None:
        self.tick_micro = {i.symbol: int(i.tick * MICRO) for i in instruments}
        self.limits: dict[str, Limits] = {s: lim for s, lim in sessions.items() if lim.any}
        self.firm_limits: dict[str, Limits] = {f: lim for f, lim in firms.items() if lim.any}
        # Each limited session's accounts: itself (when it has limits) and its firm (when that has some).
        self.accounts: dict[str, tuple[str, ...]] = {}
        for session in set(self.limits) | {s for s, f in firm_of.items() if f in self.firm_limits}:
            own = (session,) if session in self.limits else ()
            firm = firm_of.get(session, "")
            self.accounts[session] = own + (("firm:" + firm,) if firm in self.firm_limits else ())
        self.watched = frozenset(self.accounts)
        # Each account's limits and how a refusal names it, resolved once (the hot path's lookups).
        self._plan: dict[str, tuple[tuple[str, Limits, str], ...]] = {
            session: tuple((a, self._limits_of(a), f"firm {a[5:]}" if a.startswith("firm:") else "session")
                           for a in accounts)
            for session, accounts in self.accounts.items()}
        # Whether a price collar is set anywhere (then the gateway follows the trades: lasttrade.py).
        self.collars = any(lim.collar_bp is not None
                           for lim in (*self.limits.values(), *self.firm_limits.values()))
        self._exposure: dict[str, _Exposure] = {}
        self._orders: dict[tuple[str, str], _Order] = {}
        self.last_trade: dict[str, int] = {}  # ticks
        self.refused = 0
        self._lock = threading.Lock()

    def _limits_of(self, account: str) -> Limits:
        if account.startswith("firm:"):
            return self.firm_limits[account[5:]]
        return self.limits[account]

    def reference(self, symbol: str) -> int | None:
        """The price (ticks) an order without a limit price is valued at: the last trade, if any."""
        return self.last_trade.get(symbol)

    def check(self, session: str, clordid: str, symbol: str, side: int, price: int | None, qty: int,
              *, collar: bool = True) -> str | None:
        """None when a new order may go (and it is counted from now on), else the limit it breaks.
        ``price``: ticks, None when the order has none to be valued at; ``collar``: False for a price
        that is not a limit price (a stop's, the last trade's)."""
        plan = self._plan.get(session)
        if plan is None:
            return None
        tick = self.tick_micro.get(symbol)
        if tick is None:
            return None  # the intake refuses an unknown symbol itself
        accounts = self.accounts[session]
        value = None if price is None else price * qty * tick
        with self._lock:
            for account, lim, who in plan:
                problem = self._breach(account, lim, who, symbol, side, price, qty, value, collar=collar)
                if problem is not None:
                    self.refused += 1
                    return problem
            key = (session, clordid)
            if key in self._orders:
                return None  # a duplicate ClOrdID: the matcher rejects it, nothing to count
            self._orders[key] = _Order(accounts, symbol, side, price or 0, qty)
            for account in accounts:
                self._add(account, symbol, side, qty, value or 0)
        return None

    def check_order(self, session: str, symbol: str, side: int, price: int | None, qty: int,
                    *, collar: bool = True) -> str | None:
        """A replace's new terms against the limits of one order (quantity, value, collar); its open
        value and position are counted when the matcher's Replaced comes back."""
        plan = self._plan.get(session)
        tick = self.tick_micro.get(symbol)
        if plan is None or tick is None:
            return None
        value = None if price is None else price * qty * tick
        with self._lock:
            for account, lim, who in plan:
                problem = self._breach(account, lim, who, symbol, side, price, qty, value, whole=False,
                                       collar=collar)
                if problem is not None:
                    self.refused += 1
                    return problem
        return None

    def _breach(self, account: str, lim: Limits, who: str, symbol: str, side: int, price: int | None,
                qty: int, value: int | None, whole: bool = True, collar: bool = True) -> str | None:
        if lim.max_order_qty is not None and qty > lim.max_order_qty:
            return f"risk limit MaxOrderQty of the {who}: OrderQty {qty} exceeds {lim.max_order_qty}"
        if value is None or price is None:
            for name, limit in (("MaxOrderValue", lim.max_order_value), ("MaxOpenValue", lim.max_open_value)):
                if limit is not None and (whole or name == "MaxOrderValue"):
                    return (f"risk limit {name} of the {who}: an order without a price cannot be valued "
                            f"before the first trade of {symbol}")
            value = 0
            collar = False
        if lim.max_order_value is not None and value > lim.max_order_value:
            return (f"risk limit MaxOrderValue of the {who}: order value {_fmt(value)} exceeds "
                    f"{_fmt(lim.max_order_value)}")
        if lim.collar_bp is not None and collar and price is not None:
            last = self.last_trade.get(symbol)
            if last is not None:
                off = (price - last) if side == BUY else (last - price)
                if off * 10_000 > last * lim.collar_bp:
                    pct = format((Decimal(lim.collar_bp) / 100).normalize(), "f")
                    return (f"risk limit PriceCollar of the {who}: price more than {pct}% through the "
                            f"last trade {_fmt(last * self.tick_micro[symbol])}")
        if not whole:
            return None
        ex = self._exposure.get(account)
        if lim.max_open_value is not None:
            open_value = ex.open_value if ex is not None else 0
            if open_value + value > lim.max_open_value:
                return (f"risk limit MaxOpenValue of the {who}: open orders {_fmt(open_value)} plus this "
                        f"{_fmt(value)} exceed {_fmt(lim.max_open_value)}")
        if lim.max_position is not None:
            pos = ex.position.get(symbol, 0) if ex is not None else 0
            if side == BUY:
                worst = pos + (ex.open_buy.get(symbol, 0) if ex is not None else 0) + qty
            else:
                worst = pos - (ex.open_sell.get(symbol, 0) if ex is not None else 0) - qty
            if abs(worst) > lim.max_position:
                return (f"risk limit MaxPosition of the {who}: {symbol} position {pos} with open orders "
                        f"and this one could reach {worst}, beyond {lim.max_position}")
        return None

    def _add(self, account: str, symbol: str, side: int, qty: int, value: int) -> None:
        ex = self._exposure.get(account)
        if ex is None:
            ex = self._exposure[account] = _Exposure()
        ex.open_value += value
        book = ex.open_buy if side == BUY else ex.open_sell
        book[symbol] = book.get(symbol, 0) + qty

    def _release(self, order: _Order, qty: int) -> None:
        """Take ``qty`` of an order's leaves out of its accounts' open orders."""
        value = qty * order.price * self.tick_micro[order.symbol]
        for account in order.account:
            ex = self._exposure[account]
            ex.open_value -= value
            book = ex.open_buy if order.side == BUY else ex.open_sell
            book[order.symbol] = book.get(order.symbol, 0) - qty
        order.leaves -= qty

    def release(self, session: str, clordid: str) -> None:
        """An order counted by ``check`` was refused before the matcher saw it (the exchange busy)."""
        with self._lock:
            self._drop_unaccepted(session, clordid)

    def trade(self, symbol: str, price: int) -> None:
        """The last trade of ``symbol`` (the market-data stream), for the price collar."""
        self.last_trade[symbol] = price

    def on_event(self, ev: Message) -> None:
        """Keep open orders and positions as the matcher's events say (the events thread)."""
        t = type(ev)
        session = getattr(ev, "session", None)
        if session not in self.watched:
            return
        with self._lock:
            if t is Accepted:
                order = self._orders.get((session, ev.clordid))  # type: ignore[attr-defined]
                if order is not None:
                    order.accepted = True
            elif t is Filled:
                order = self._orders.get((session, ev.clordid))  # type: ignore[attr-defined]
                if order is not None:
                    order.accepted = True
                    qty = ev.last_qty  # type: ignore[attr-defined]
                    self._release(order, min(qty, order.leaves))
                    signed = qty if order.side == BUY else -qty
                    for account in order.account:
                        pos = self._exposure[account].position
                        pos[order.symbol] = pos.get(order.symbol, 0) + signed
                    if ev.leaves_qty == 0:  # type: ignore[attr-defined]
                        del self._orders[(session, ev.clordid)]  # type: ignore[attr-defined]
            elif t is Cancelled:
                # The order's own ClOrdID is OrigClOrdID when a cancel request cancelled it, ClOrdID
                # when the exchange did (a session's end, a mass cancel, an IOC's rest).
                key = (session, ev.orig_clordid)  # type: ignore[attr-defined]
                if key not in self._orders:
                    key = (session, ev.clordid)  # type: ignore[attr-defined]
                order = self._orders.pop(key, None)
                if order is not None:
                    self._release(order, order.leaves)
            elif t is Rejected:
                self._drop_unaccepted(session, ev.clordid)  # type: ignore[attr-defined]
            elif t is Refused:
                body = ev.body  # type: ignore[attr-defined]
                if body.startswith("35=8\x01") and "\x01150=8\x01" in body:
                    start = body.find("\x0111=") + 4
                    self._drop_unaccepted(session, body[start:body.find("\x01", start)])
            elif t is Replaced:
                old = self._orders.pop((session, ev.orig_clordid), None)  # type: ignore[attr-defined]
                if old is not None:
                    self._release(old, old.leaves)
                    leaves = ev.leaves_qty  # type: ignore[attr-defined]
                    new = _Order(old.account, old.symbol, old.side, ev.price, 0, True)  # type: ignore[attr-defined]
                    value = leaves * new.price * self.tick_micro[new.symbol]
                    for account in new.account:
                        self._add(account, new.symbol, new.side, leaves, value)
                    new.leaves = leaves
                    self._orders[(session, ev.clordid)] = new  # type: ignore[attr-defined]

    def _drop_unaccepted(self, session: str, clordid: str) -> None:
        order = self._orders.get((session, clordid))
        if order is not None and not order.accepted:
            self._release(order, order.leaves)
            del self._orders[(session, clordid)]

    def exposure(self, account: str) -> tuple[int, dict[str, int]]:
        """(open value in MICRO, positions) of a session or ``firm:NAME``: for tests and the health report."""
        with self._lock:
            ex = self._exposure.get(account)
            return (0, {}) if ex is None else (ex.open_value, dict(ex.position))

