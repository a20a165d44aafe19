"""FIX market data: book mirrors, subscriptions and the V/W/X/Y bodies; pure, no QuickFIX, no Redis.

The matcher publishes every book change on the market stream (``BookUpdate``: the levels of one book
that changed in one batch, at their new state) and, on request, a whole book (``BookImage``). A mirror
starts at the first BookImage of its symbol and applies every BookUpdate after it, so it equals the
matcher's book at the same point of the stream; the gateway serves snapshots (W) from it without
asking the matcher anything.

Subscribers get conflated updates: ``flush()``, called every FIXLAB_MD_INTERVAL_MS, gives each
subscription at most one message per symbol with the NET change of each level since the previous
flush (new, change or delete; a level that came and went in between is not sent at all), after the
trades of the interval. What is kept between flushes is bounded by the book, never by time: per
symbol, the value each changed level had at the last flush (one entry per level), the first
``max_trades`` trades of the interval, and beyond them one summed quantity per price (the price band
bounds it). A subscription made since the last flush keeps, until its first flush, the values its
snapshot showed for the levels already changed (again at most one per level).

Decisions where FIX leaves a choice:
- MDUpdateType 0 (full refresh) with SubscriptionRequestType 1: a W per flush for each symbol that
  changed (the whole view, plus the trades since the last flush), instead of an X.
- MarketDepth 0 is the whole book; N (1..MAX_DEPTH) the best N levels of each side: a level
  entering the best N is "new", one pushed out of them is "delete".
- A request naming one unknown symbol is rejected whole (281=0, Text names it).
- Trades beyond ``max_trades`` in one interval are summed per price (one 269=2 entry per price, in
  the order the prices first traded, after the individual ones): quantity traded is never lost.
- An unsubscribe (263=2) of an MDReqID the session has not subscribed gets a Y without
  MDReqRejReason (FIX 4.4 has no reason for it) and Text saying so.
- A request the mirror cannot answer yet (its BookImage has not arrived) is answered when it does.

During a call (the matcher's ``Indicative``, its phase from ``PhaseChanged``), subscribers that ask
for them get the uncross the book would give now, as entries of their own (docs/trading-day.md):
- the indicative price: MDEntryType 4 (Opening price; also for the re-opening auction of a halt)
  or 5 (Closing price), MDEntryPx the price, MDEntrySize the volume it would execute,
  TradingSessionSubID (625) the auction (2 opening, 4 closing, 9 halt), asked for with 269=4, 5 or
  Q (FIX 5.0 SP2's Auction clearing price: its dialect says Q);
- the imbalance: MDEntryType A, MDEntryPx the indicative price, MDEntrySize the surplus left there,
  TradeCondition (277) P (more buyers) or Q (more sellers), none when balanced; FIX 4.2 has no A.
An entry is new when the book first crosses in a call, changed as the uncross moves, deleted when
nothing crosses any more or the call ends. They are conflated like the levels: one entry per kind
per flush at most.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from shared.config import Instrument
from shared.fix.codec import SOH_TEXT as SOH
from shared.schema import BUY, CALL_PHASES, PHASE_CONTINUOUS, PHASE_PRE_CLOSE, PHASE_PRE_OPEN, SELL

MAX_DEPTH = 100  # MarketDepth above this is refused (281=5)
MAX_SUBSCRIPTIONS = 100  # per session (281=2 beyond)
MAX_WAITING = 1000  # requests waiting for a mirror, all sessions together (281=2 beyond)

BID, OFFER, TRADE = "0", "1", "2"
OPENING, CLOSING, IMBALANCE, CLEARING = "4", "5", "A", "Q"  # indicative entries, in a call
PRICE_TYPES = frozenset((OPENING, CLOSING, CLEARING))  # any of them asks for the indicative price
ENTRY_TYPES = frozenset((BID, OFFER, TRADE, IMBALANCE)) | PRICE_TYPES
_OFFERED = "0 (bid), 1 (offer), 2 (trade), 4/5/Q (indicative price), A (imbalance)"
# The auction of each call phase: its indicative price's MDEntryType and TradingSessionSubID (625).
_AUCTION = {PHASE_PRE_OPEN: (OPENING, "2"), PHASE_PRE_CLOSE: (CLOSING, "4")}
_HALT_AUCTION = (OPENING, "9")  # a halt's re-opening auction
_MORE = {BUY: "P", SELL: "Q"}  # TradeCondition (277): Imbalance more buyers / more sellers
_SIDE_TYPE = {BUY: BID, SELL: OFFER}

# MDReqRejReason (281)
UNKNOWN_SYMBOL = "0"
DUPLICATE_MDREQID = "1"
INSUFFICIENT_BANDWIDTH = "2"
UNSUPPORTED_SUBSCRIPTION = "4"
UNSUPPORTED_DEPTH = "5"
UNSUPPORTED_UPDATE_TYPE = "6"
UNSUPPORTED_AGGREGATED = "7"
UNSUPPORTED_ENTRY_TYPE = "8"

Level = tuple[int, int]  # (qty, orders) of one price level
Key = tuple[int, int]  # (side, price)
Out = tuple[str, str]  # (session, FIX body from tag 35 on)
Row = tuple[int, int, int]  # (price, qty, orders)
# Indicative entries as sent: MDEntryType -> (MDEntryPx text, the rest of the entry after it).
Shown = dict[str, tuple[str, str]]


def _text(text: str) -> str:
    return text.replace(SOH, " ") or "rejected"


def reject(req_id: str, reason: str | None, text: str) -> str:
    """A MarketDataRequestReject (35=Y) body."""
    return (f"35=Y{SOH}262={req_id or 'NONE'}{SOH}" + (f"281={reason}{SOH}" if reason is not None else "")
            + f"58={_text(text)}{SOH}")


@dataclass(slots=True)
class Request:
    """A parsed MarketDataRequest (35=V)."""

    req_id: str
    kind: str  # 263: "0" snapshot, "1" snapshot + updates, "2" unsubscribe
    depth: int
    full_refresh: bool  # 265=0
    types: frozenset[str]
    symbols: tuple[str, ...]


class BadRequest(ValueError):
    """A MarketDataRequest refused: its MDReqID, MDReqRejReason (or None) and Text."""

    def __init__(self, req_id: str, reason: str | None, text: str) -> None:
        super().__init__(text)
        self.req_id = req_id
        self.reason = reason
        self.text = text


def parse_request(raw: str) -> Request:
    """Read a MarketDataRequest from its text; raise BadRequest for what the venue does not offer."""
    values: dict[str, str] = {}
    types: list[str] = []
    symbols: list[str] = []
    entries = 0
    for item in raw.split(SOH):
        tag, _, value = item.partition("=")
        if tag == "269":
            types.append(value)
        elif tag == "55":
            symbols.append(value)
        elif tag == "146":
            entries = int(value) if value.isdigit() else 0
        elif tag not in values:
            values[tag] = value
    req_id = values.get("262", "")
    if not req_id:
        raise BadRequest("", None, "MDReqID (262) missing")
    kind = values.get("263", "")
    if kind not in ("0", "1", "2"):
        raise BadRequest(req_id, UNSUPPORTED_SUBSCRIPTION, f"SubscriptionRequestType {kind!r}: 0, 1 or 2")
    if kind == "2":
        return Request(req_id, kind, 0, False, frozenset(), ())
    depth_text = values.get("264", "")
    try:
        depth = int(depth_text)
    except ValueError:
        depth = -1
    if not 0 <= depth <= MAX_DEPTH:
        raise BadRequest(req_id, UNSUPPORTED_DEPTH,
                         f"MarketDepth {depth_text!r}: 0 (full book) or 1 to {MAX_DEPTH} levels")
    update = values.get("265", "1")
    if update not in ("0", "1"):
        raise BadRequest(req_id, UNSUPPORTED_UPDATE_TYPE, f"MDUpdateType {update!r}: 0 or 1")
    if values.get("266", "Y") != "Y":
        raise BadRequest(req_id, UNSUPPORTED_AGGREGATED, "only aggregated books (AggregatedBook Y)")
    unsupported = [t for t in types if t not in ENTRY_TYPES]
    if unsupported or not types:
        raise BadRequest(req_id, UNSUPPORTED_ENTRY_TYPE,
                         f"MDEntryType {unsupported[0]!r}: {_OFFERED}" if unsupported
                         else f"no MDEntryType: {_OFFERED}")
    if not symbols or len(symbols) != entries:
        raise BadRequest(req_id, UNKNOWN_SYMBOL, "every NoRelatedSym entry needs a Symbol (55)")
    return Request(req_id, kind, depth, update == "0", frozenset(types), tuple(dict.fromkeys(symbols)))


@dataclass(slots=True, eq=False)
class Subscription:
    session: str
    req_id: str
    symbols: tuple[str, ...]
    depth: int
    types: frozenset[str]
    full_refresh: bool
    # Per symbol, until its first flush: what its snapshot showed that the book's last-flush state
    # does not (see _Symbol.baseline).
    fresh: dict[str, _Baseline] = field(default_factory=dict)


@dataclass(slots=True)
class _Baseline:
    levels: dict[Key, Level | None]  # full depth: levels changed since the last flush, as in the W
    top: tuple[tuple[Row, ...], tuple[Row, ...]] | None  # depth N: the best N of each side, as in the W
    trade_seq: int  # trades up to this one were before the W
    excess: dict[int, int]  # the summed trades (price -> qty) at the W
    shown: Shown  # the indicative entries the W showed


class _Symbol:
    """One instrument's mirror and what changed since the last flush."""

    def __init__(self, instrument: Instrument) -> None:
        self.instrument = instrument
        self.ready = False
        self.sides: dict[int, dict[int, Level]] = {BUY: {}, SELL: {}}
        self.prev: dict[Key, Level | None] = {}  # changed levels: their value at the last flush
        self.trades: list[tuple[int, int, int]] = []  # (seq, price, qty), the first max_trades
        self.excess: dict[int, int] = {}  # price -> qty of the trades beyond them
        self.trade_seq = 0
        self.published: dict[int, tuple[tuple[Row, ...], tuple[Row, ...]]] = {}  # depth N -> best N
        self.subs: dict[int, Subscription] = {}  # id() -> subscription, in the order they came
        self._px: dict[int, str] = {}
        self.phase = PHASE_CONTINUOUS
        self.indicative = (0, 0, 0, 0)  # the matcher's last (price, volume, imbalance qty, side)
        self.shown: Shown = {}  # the indicative entries as of the last flush
        self.moved = False  # the indicative or the phase changed since the last flush

    def px(self, ticks: int) -> str:
        text = self._px.get(ticks)
        if text is None:
            if len(self._px) > 10_000:
                self._px.clear()
            text = self._px[ticks] = str(ticks * self.instrument.tick)
        return text

    def set_level(self, side: int, price: int, qty: int, orders: int) -> None:
        levels = self.sides[side]
        old = levels.get(price)
        key = (side, price)
        if key not in self.prev:
            self.prev[key] = old
        if qty > 0:
            levels[price] = (qty, orders)
        elif old is not None:
            del levels[price]

    def top(self, depth: int) -> tuple[tuple[Row, ...], tuple[Row, ...]]:
        """Each side's levels best first, the best ``depth`` (0: all)."""
        bids = sorted(self.sides[BUY].items(), reverse=True)
        asks = sorted(self.sides[SELL].items())
        if depth:
            bids, asks = bids[:depth], asks[:depth]
        return (tuple((p, q, n) for p, (q, n) in bids), tuple((p, q, n) for p, (q, n) in asks))

    def baseline(self) -> _Baseline:
        """What a snapshot sent now shows, for the next flush to start from."""
        return _Baseline({k: self.sides[k[0]].get(k[1]) for k in self.prev}, None, self.trade_seq,
                         dict(self.excess), self.showing())

    def showing(self) -> Shown:
        """The indicative entries of the book now: none outside a call or when nothing crosses."""
        price, volume, imbalance, side = self.indicative
        auction = _AUCTION.get(self.phase, _HALT_AUCTION) if self.phase in CALL_PHASES else None
        if auction is None or price <= 0 or volume <= 0:
            return {}
        kind, sub_id = auction
        px = self.px(price)
        more = f"277={_MORE[side]}{SOH}" if imbalance and side in _MORE else ""
        return {kind: (px, f"271={volume}{SOH}625={sub_id}{SOH}"),
                IMBALANCE: (px, f"271={imbalance}{SOH}625={sub_id}{SOH}{more}")}


class MarketData:
    """Mirrors of the books and every session's subscriptions; each call returns what to send."""

    def __init__(self, instruments: Iterable[Instrument], *, max_trades: int = 50) -> None:
        self.max_trades = max_trades
        self.symbols = {i.symbol: _Symbol(i) for i in instruments}
        self.sessions: dict[str, dict[str, Subscription]] = {}  # session -> MDReqID -> subscription
        self.waiting: list[tuple[str, Request]] = []  # (session, request) until their mirrors are ready

    # ------------------------------------------------------------------ the mirrors

    def ready(self, symbol: str) -> bool:
        s = self.symbols.get(symbol)
        return s is not None and s.ready

    def apply_image(self, symbol: str, bids: Sequence[Sequence[int]], asks: Sequence[Sequence[int]]
                    ) -> list[Out]:
        """A whole book: the mirror starts (or is replaced, its differences sent as updates).
        Returns the answers to requests that were waiting for it."""
        s = self.symbols.get(symbol)
        if s is None:
            return []
        if not s.ready:
            s.sides = {BUY: {p: (q, n) for p, q, n in bids if q > 0},
                       SELL: {p: (q, n) for p, q, n in asks if q > 0}}
            s.ready = True
            return self._answer_waiting()
        for side, rows in ((BUY, bids), (SELL, asks)):
            now = {p: (q, n) for p, q, n in rows if q > 0}
            levels = s.sides[side]
            for price in [p for p in levels if p not in now]:
                s.set_level(side, price, 0, 0)
            for price, (qty, orders) in now.items():
                if levels.get(price) != (qty, orders):
                    s.set_level(side, price, qty, orders)
        return []

    def apply_update(self, symbol: str, changes: Iterable[Sequence[int]]) -> None:
        """The levels of one book that changed in one matcher batch (ignored before its image)."""
        s = self.symbols.get(symbol)
        if s is None or not s.ready:
            return
        for side, price, qty, orders in changes:
            s.set_level(side, price, qty, orders)

    def apply_trade(self, symbol: str, price: int, qty: int) -> None:
        s = self.symbols.get(symbol)
        if s is None or not s.ready:
            return
        s.trade_seq += 1
        if len(s.trades) < self.max_trades:
            s.trades.append((s.trade_seq, price, qty))
        else:
            s.excess[price] = s.excess.get(price, 0) + qty

    def apply_phase(self, symbol: str, phase: int) -> None:
        """The instrument's phase (PhaseChanged): which auction an indicative is for."""
        s = self.symbols.get(symbol)
        if s is not None and s.phase != phase:
            s.phase = phase
            s.moved = True

    def apply_indicative(self, symbol: str, price: int, volume: int, imbalance: int, side: int) -> None:
        """The matcher's Indicative: the uncross the call book would give now (a whole state: taken
        before the mirror's image too)."""
        s = self.symbols.get(symbol)
        if s is not None and s.indicative != (price, volume, imbalance, side):
            s.indicative = (price, volume, imbalance, side)
            s.moved = True

    def book(self, symbol: str) -> tuple[tuple[Row, ...], tuple[Row, ...]]:
        """The mirror's whole book, best first on each side."""
        return self.symbols[symbol].top(0)

    # ------------------------------------------------------------------ requests

    @property
    def subscribed(self) -> bool:
        return bool(self.waiting) or any(self.sessions.values())

    def request(self, session: str, raw: str) -> list[Out]:
        """A MarketDataRequest's text: the answers to send now (W, Y, or nothing yet)."""
        try:
            req = parse_request(raw)
        except BadRequest as exc:
            return [(session, reject(exc.req_id, exc.reason, exc.text))]
        subs = self.sessions.get(session, {})
        if req.kind == "2":
            sub = subs.pop(req.req_id, None)
            waiting = [w for w in self.waiting if w[0] == session and w[1].req_id == req.req_id]
            if sub is None and not waiting:
                return [(session, reject(req.req_id, None, f"no subscription {req.req_id!r} to cancel"))]
            if sub is not None:
                self._drop(sub)
            self.waiting = [w for w in self.waiting if w not in waiting]
            return []
        unknown = [sym for sym in req.symbols if sym not in self.symbols]
        if unknown:
            return [(session, reject(req.req_id, UNKNOWN_SYMBOL, f"unknown symbol {unknown[0]}"))]
        if req.req_id in subs or any(w[0] == session and w[1].req_id == req.req_id for w in self.waiting):
            return [(session, reject(req.req_id, DUPLICATE_MDREQID, f"MDReqID {req.req_id!r} is in use"))]
        held = len(subs) + sum(1 for w in self.waiting if w[0] == session)
        if req.kind == "1" and held >= MAX_SUBSCRIPTIONS:
            return [(session, reject(req.req_id, INSUFFICIENT_BANDWIDTH,
                                     f"at most {MAX_SUBSCRIPTIONS} subscriptions per session"))]
        if not all(self.symbols[sym].ready for sym in req.symbols):
            if len(self.waiting) >= MAX_WAITING:
                return [(session, reject(req.req_id, INSUFFICIENT_BANDWIDTH,
                                         "too many requests waiting for market data; try again"))]
            self.waiting.append((session, req))
            return []
        return self._answer(session, req)

    def drop_session(self, session: str) -> None:
        """The session ended: its subscriptions and waiting requests go."""
        for sub in self.sessions.pop(session, {}).values():
            self._drop(sub)
        self.waiting = [w for w in self.waiting if w[0] != session]

    def _drop(self, sub: Subscription) -> None:
        for sym in sub.symbols:
            self.symbols[sym].subs.pop(id(sub), None)

    def _answer_waiting(self) -> list[Out]:
        out: list[Out] = []
        still: list[tuple[str, Request]] = []
        for session, req in self.waiting:
            if all(self.symbols[sym].ready for sym in req.symbols):
                out += self._answer(session, req)
            else:
                still.append((session, req))
        self.waiting = still
        return out

    def _answer(self, session: str, req: Request) -> list[Out]:
        out = []
        sub = None
        if req.kind == "1":
            sub = Subscription(session, req.req_id, req.symbols, req.depth, req.types, req.full_refresh)
            self.sessions.setdefault(session, {})[req.req_id] = sub
        for sym in req.symbols:
            s = self.symbols[sym]
            out.append((session, self._full(req.req_id, s, req.depth, req.types, ())))
            if sub is not None:
                s.subs[id(sub)] = sub
                base = s.baseline()
                if req.depth:
                    base.top = s.top(req.depth)
                sub.fresh[sym] = base
        return out

    # ------------------------------------------------------------------ bodies

    def _full(self, req_id: str, s: _Symbol, depth: int, types: frozenset[str],
              trades: Sequence[tuple[int, int]]) -> str:
        """A MarketDataSnapshotFullRefresh (35=W): the aggregated levels, best first, then trades."""
        bids, asks = s.top(depth)
        parts = []
        if BID in types:
            parts += [f"269=0{SOH}270={s.px(p)}{SOH}271={q}{SOH}346={n}{SOH}" for p, q, n in bids]
        if OFFER in types:
            parts += [f"269=1{SOH}270={s.px(p)}{SOH}271={q}{SOH}346={n}{SOH}" for p, q, n in asks]
        if TRADE in types:
            parts += [f"269=2{SOH}270={s.px(p)}{SOH}271={q}{SOH}" for p, q in trades]
        if s.phase in CALL_PHASES:
            parts += [f"269={kind}{SOH}270={px}{SOH}{rest}" for kind, (px, rest) in s.showing().items()
                      if _wants(types, kind)]
        return (f"35=W{SOH}262={req_id}{SOH}55={s.instrument.symbol}{SOH}268={len(parts)}{SOH}"
                + "".join(parts))

    # ------------------------------------------------------------------ flush

    def flush(self) -> list[Out]:
        """Every subscription's conflated update since the last flush, one message per symbol."""
        out: list[Out] = []
        for s in self.symbols.values():
            if not s.subs:
                s.published.clear()  # no one holds it: the next subscriber starts from its own W
            elif s.prev or s.trades or s.excess or s.moved or any(sub.fresh for sub in s.subs.values()):
                out += self._flush_symbol(s)
            if s.moved:
                s.shown = s.showing()
                s.moved = False
            s.prev.clear()
            s.trades.clear()
            s.excess.clear()
        return out

    def _flush_symbol(self, s: _Symbol) -> list[Out]:
        sym = s.instrument.symbol
        depths = {sub.depth for sub in s.subs.values() if sub.depth}
        tops = {d: s.top(d) for d in depths} if (s.prev or any(d not in s.published for d in depths)) else {}
        # Subscriptions in step (their last flush was the book's) with the same depth and entry
        # types get the same entries: built once, only the MDReqID differs.
        shared: dict[tuple[int, frozenset[str]], str | None] = {}
        out: list[Out] = []
        now = s.showing() if s.moved else s.shown
        for sub in list(s.subs.values()):
            base = sub.fresh.pop(sym, None)
            if base is None and not sub.full_refresh:
                key = (sub.depth, sub.types)
                if key in shared:
                    tail = shared[key]
                else:
                    levels = self._levels(s, sub.depth, sub.types, None, tops)
                    levels += _indicative(sym, s.shown, now, sub.types)
                    tail = shared[key] = self._x_tail(s, levels, self._trades(s, sub.types, None))
                if tail is not None:
                    out.append((sub.session, f"35=X{SOH}262={sub.req_id}{SOH}" + tail))
                continue
            entries = self._levels(s, sub.depth, sub.types, base, tops)
            entries += _indicative(sym, base.shown if base is not None else s.shown, now, sub.types)
            trades = self._trades(s, sub.types, base)
            if not entries and not trades:
                continue
            if sub.full_refresh:
                out.append((sub.session, self._full(sub.req_id, s, sub.depth, sub.types, trades)))
            else:
                tail = self._x_tail(s, entries, trades)
                out.append((sub.session, f"35=X{SOH}262={sub.req_id}{SOH}{tail}"))
        for d in list(s.published):
            if d not in depths:
                del s.published[d]
        s.published.update(tops)
        return out

    @staticmethod
    def _x_tail(s: _Symbol, entries: list[str], trades: list[tuple[int, int]]) -> str | None:
        """An X's entries (from NoMDEntries on): the trades, then the levels; None when empty."""
        if not entries and not trades:
            return None
        sym = s.instrument.symbol
        parts = [f"279=0{SOH}269=2{SOH}55={sym}{SOH}270={s.px(p)}{SOH}271={q}{SOH}" for p, q in trades]
        return f"268={len(parts) + len(entries)}{SOH}" + "".join(parts) + "".join(entries)

    def _trades(self, s: _Symbol, types: frozenset[str], base: _Baseline | None) -> list[tuple[int, int]]:
        if TRADE not in types:
            return []
        seq = base.trade_seq if base is not None else 0
        trades = [(p, q) for n, p, q in s.trades if n > seq]
        for price, qty in s.excess.items():
            if base is not None:
                qty -= base.excess.get(price, 0)
            if qty > 0:
                trades.append((price, qty))
        return trades

    def _levels(self, s: _Symbol, depth: int, types: frozenset[str], base: _Baseline | None,
                tops: dict[int, tuple[tuple[Row, ...], tuple[Row, ...]]]) -> list[str]:
        """The X entries taking a subscriber from what it was last sent to the book now."""
        sym = s.instrument.symbol
        entries: list[str] = []
        if depth == 0:
            for (side, price), old in s.prev.items():
                kind = _SIDE_TYPE[side]
                if kind not in types:
                    continue
                if base is not None and (side, price) in base.levels:
                    old = base.levels[(side, price)]
                new = s.sides[side].get(price)
                if new == old:
                    continue
                entries.append(_entry(sym, s.px(price), kind, old, new))
            return entries
        if depth not in tops:
            return entries  # nothing changed and this depth was published at the last flush
        before = base.top if base is not None and base.top is not None else s.published.get(depth)
        if before is None:
            return entries
        for kind, was, now in ((BID, before[0], tops[depth][0]), (OFFER, before[1], tops[depth][1])):
            if kind not in types or was == now:
                continue
            old_levels = {p: (q, n) for p, q, n in was}
            new_levels = {p: (q, n) for p, q, n in now}
            # Deletes first: a client keeping exactly N levels never holds N + 1.
            entries += [_entry(sym, s.px(p), kind, lv, None) for p, lv in old_levels.items()
                        if p not in new_levels]
            entries += [_entry(sym, s.px(p), kind, old_levels.get(p), lv) for p, lv in new_levels.items()
                        if old_levels.get(p) != lv]
        return entries


def _wants(types: frozenset[str], kind: str) -> bool:
    """Whether a subscription to ``types`` gets an indicative entry of ``kind``."""
    return kind in types if kind == IMBALANCE else not PRICE_TYPES.isdisjoint(types)


def _indicative(symbol: str, before: Shown, now: Shown, types: frozenset[str]) -> list[str]:
    """The X entries taking indicative entries ``before`` to ``now`` (deletes first)."""
    if before == now:
        return []
    out = [f"279=2{SOH}269={kind}{SOH}55={symbol}{SOH}270={px}{SOH}" for kind, (px, _rest) in before.items()
           if kind not in now and _wants(types, kind)]
    for kind, entry in now.items():
        old = before.get(kind)
        if old != entry and _wants(types, kind):
            action = "0" if old is None else "1"
            out.append(f"279={action}{SOH}269={kind}{SOH}55={symbol}{SOH}270={entry[0]}{SOH}{entry[1]}")
    return out


def _entry(symbol: str, px: str, kind: str, old: Level | None, new: Level | None) -> str:
    """One MDIncGrp entry, fields in the order of FIX44.xml's group."""
    if new is None:
        return f"279=2{SOH}269={kind}{SOH}55={symbol}{SOH}270={px}{SOH}"
    action = "0" if old is None else "1"
    return f"279={action}{SOH}269={kind}{SOH}55={symbol}{SOH}270={px}{SOH}271={new[0]}{SOH}346={new[1]}{SOH}"

