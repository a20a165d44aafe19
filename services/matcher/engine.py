"""The matching engine: commands in, events out, for the instruments of one shard.

Pure and deterministic: time comes from each command's ``ts`` and every id (order, execution,
match) from counters in the state, so the same commands always give the same events, byte for
byte. That is how the service recovers after a crash: snapshot + replay of what was already
published rebuilds exactly the state the events came from.

Events come out in the schema's wire form, ``(type_code, field1, field2, ...)`` in declaration
order, paired with their destination: the gateway id that gets an order event, or None for market
data. That is the bus's own format (``schema.encode_wire_batch`` packs it, ``schema.from_wire``
turns it into a message), and it keeps the hot path free of dataclass construction, which costs
about 3 us per frozen event on this kind of machine.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from services.matcher.auction import Uncross, uncross_price
from services.matcher.book import HELD, IN_BOOK, IN_MARKET, Book, Fill, Order, SpecialOrder
from services.matcher.prorata import allocate
from shared.config import Instrument
from shared.schema import (
    ALL_SYMBOLS,
    AT_CLOSE,
    AT_OPEN,
    BUY,
    CALL_PHASES,
    CXL_DUPLICATE_CLORDID,
    CXL_OTHER,
    CXL_TOO_LATE,
    CXL_UNKNOWN_ORDER,
    DAY,
    FOK,
    GTC,
    IOC,
    MASS_CANCEL_ALL,
    MASS_CANCEL_SYMBOL,
    ORD_LIMIT,
    ORD_MARKET,
    ORD_STOP,
    ORD_STOP_LIMIT,
    PHASE_CLOSED,
    PHASE_CONTINUOUS,
    PHASE_HALTED,
    PHASE_NAMES,
    PHASE_PRE_CLOSE,
    PHASE_PRE_OPEN,
    PHASES,
    REJ_DUPLICATE_ORDER,
    REJ_EXCHANGE_CLOSED,
    REJ_INCORRECT_QUANTITY,
    REJ_ORDER_EXCEEDS_LIMIT,
    REJ_OTHER,
    REJ_UNKNOWN_SYMBOL,
    RESPONSE_TO_CANCEL,
    RESPONSE_TO_REPLACE,
    SELL,
    STP_CANCEL_AGGRESSOR,
    STP_CANCEL_BOTH,
    STP_CANCEL_RESTING,
    STP_OFF,
    Accepted,
    BookImage,
    BookUpdate,
    Cancelled,
    CancelOrder,
    CancelRejected,
    Depth,
    EndOfDay,
    Filled,
    ImageRequest,
    Indicative,
    MassCancel,
    MassCancelReport,
    MatcherSnapshot,
    Message,
    NewOrder,
    PhaseChanged,
    Rejected,
    Replaced,
    ReplaceOrder,
    SessionEnded,
    SetPhase,
    StatusReport,
    StatusRequest,
    Trade,
    Triggered,
    as_wire,
    from_wire,
    message_types,
)

# OrdStatus (39) values the engine reports.
ST_NEW = 0
ST_PARTIAL = 1
ST_FILLED = 2
ST_CANCELED = 4
ST_REPLACED = 5
ST_REJECTED = 8
NOT_AN_ORDER = -1

_ACCEPTED = Accepted.CODE
_REJECTED = Rejected.CODE
_FILLED = Filled.CODE
_CANCELLED = Cancelled.CODE
_REPLACED = Replaced.CODE
_CANCEL_REJECTED = CancelRejected.CODE
_TRADE = Trade.CODE
_DEPTH = Depth.CODE
_STATUS_REPORT = StatusReport.CODE
_MASS_CANCEL_REPORT = MassCancelReport.CODE
_BOOK_UPDATE = BookUpdate.CODE
_BOOK_IMAGE = BookImage.CODE
_TRIGGERED = Triggered.CODE
_PHASE_CHANGED = PhaseChanged.CODE
_INDICATIVE = Indicative.CODE
RESTATED = "restated with the book image"  # the reason of a PhaseChanged that repeats a phase

# MassCancelRejectReason (532), FIX 4.4. An unsupported request type is 99 with a text, as the
# gateway answers it when it refuses one itself (0, "mass cancel not supported", would say none is).
MASS_REJ_UNKNOWN_SECURITY = 1
MASS_REJ_OTHER = 99
# A session's StatusRequests remembered to tell a producer's retry from a new request: a retry
# writes the same records again right after, never this many status requests of one session later.
STATUS_MEMORY = 64

_SIDES = frozenset((BUY, SELL))
_TIFS = frozenset((DAY, GTC, IOC, FOK))
_ALL_TIFS = frozenset((DAY, GTC, IOC, FOK, AT_OPEN, AT_CLOSE))
_ORD_TYPES = frozenset((ORD_MARKET, ORD_LIMIT, ORD_STOP, ORD_STOP_LIMIT))
_TYPE_NAMES = {ORD_MARKET: "market", ORD_LIMIT: "limit", ORD_STOP: "stop", ORD_STOP_LIMIT: "stop limit"}
_TIF_NAMES = {DAY: "Day", GTC: "GTC", IOC: "IOC", FOK: "FOK", AT_OPEN: "At the Opening",
              AT_CLOSE: "At the Close"}
# An uncross trade has no aggressor: Trade.aggressor_side 0.
AUCTION_AGGRESSOR = 0
_STPS = frozenset((STP_OFF, STP_CANCEL_RESTING, STP_CANCEL_AGGRESSOR, STP_CANCEL_BOTH))

Wire = tuple[Any, ...]
Out = tuple[str | None, Wire]  # (gateway id, or None for market data; event in wire form)


@dataclass(frozen=True, slots=True)
class Limits:
    """What one order and one session may do (the reference lab's rules)."""

    min_qty: int = 1
    max_qty: int = 1000
    max_open_per_session: int = 20
    depth_levels: int = 10
    # Done orders whose final state a session's StatusRequest can still get (its most recent ones).
    done_orders: int = 100

    def __post_init__(self) -> None:
        if self.done_orders < 1:
            raise ValueError(f"done_orders={self.done_orders}: at least the last done order is kept")


class MalformedCommand(ValueError):
    """A command whose fields have the wrong types: a producer bug, not a business refusal."""


@dataclass(slots=True)
class BatchResult:
    """What one batch of commands produced."""

    events: list[Out] = field(default_factory=list)
    malformed: list[tuple[Any, str]] = field(default_factory=list)  # (command as given, why)
    redelivered: int = 0

    def messages(self) -> list[Message]:
        """The events as schema messages, in the order they were emitted."""
        return [from_wire(w) for _, w in self.events]


# A done order's final state as a session keeps it (an Order that ended in a book is kept as it is):
# (clordid, order_id, symbol, side, price, qty, cum, cost, OrdStatus).
DoneRecord = tuple[str, str, str, int, int, int, int, int, int]


class SessionState:
    """What the engine remembers about one FIX session until it ends."""

    __slots__ = ("closed", "done", "live", "name", "queries", "renamed", "seen")

    def __init__(self, name: str, keep: int = 100) -> None:
        self.name = name
        self.seen: dict[str, int] = {}  # every ClOrdID used -> MsgSeqNum of the command that used it
        self.live: dict[str, Order] = {}  # current ClOrdID -> open order, in the order they opened
        # ClOrdID of an order version no longer open -> its OrdStatus, except filled orders (the
        # common end, left out to keep snapshots small); a cancel/replace/mass cancel request's own
        # ClOrdID -> NOT_AN_ORDER.
        self.closed: dict[str, int] = {}
        # The session's most recent done orders, oldest first (a bounded deque drops the oldest in
        # C: one call on the hot path): an Order that ended in a book, or a DoneRecord.
        self.done: deque[Order | DoneRecord] = deque(maxlen=keep)
        self.renamed: dict[str, str] = {}  # ClOrdID replaced away -> the ClOrdID that replaced it
        self.queries: deque[tuple[str, int]] = deque(maxlen=STATUS_MEMORY)  # StatusRequests answered

    def keep(self, done: Order | DoneRecord) -> None:
        """Remember a done order (the oldest one kept goes when the deque is full)."""
        self.done.append(done)

    def done_records(self) -> tuple[DoneRecord, ...]:
        """The done orders kept, oldest first."""
        return tuple(_record(d) for d in self.done)

    def find_done(self, clordid: str = "", order_id: str = "") -> DoneRecord | None:
        """A kept done order by its last ClOrdID, or by OrderID."""
        for d in self.done:
            rec = _record(d)
            if (clordid and rec[0] == clordid) or (order_id and rec[1] == order_id != "NONE"):
                return rec
        return None


def _record(done: Order | DoneRecord) -> DoneRecord:
    if type(done) is tuple:
        return done
    o: Order = done  # type: ignore[assignment]
    # An order leaves a book done when it is filled or cancelled (a reject never rests).
    return (o.clordid, o.order_id, o.symbol, o.side, o.price, o.qty, o.cum, o.cost,
            ST_FILLED if o.cum == o.qty else ST_CANCELED)


# Commands travel in wire form: (code, field1, ...) in the schema's declaration order.
_NEW, _CANCEL, _REPLACE, _END = NewOrder.CODE, CancelOrder.CODE, ReplaceOrder.CODE, SessionEnded.CODE
_EOD = EndOfDay.CODE
_STATUS, _MASS, _IMAGE = StatusRequest.CODE, MassCancel.CODE, ImageRequest.CODE
_SET_PHASE = SetPhase.CODE
_COMMANDS: dict[int, type[Message]] = {c.CODE: c for c in (NewOrder, CancelOrder, ReplaceOrder, SessionEnded,
                                                           EndOfDay, StatusRequest, MassCancel, ImageRequest,
                                                           SetPhase)}
_NAMES = {c.CODE: c.__name__ for c in message_types()}
_STRINGS = frozenset(("session", "clordid", "orig_clordid", "symbol", "reply_to"))
_TEXTS = frozenset(("reason",))  # strings that may be anything
# Strings that may be empty: OrderID and OrdStatusReqID when the client gave none; a StatusRequest's
# or MassCancel's symbol (the engine answers an empty one; "all orders" has none).
_MAYBE_EMPTY = {StatusRequest: frozenset(("order_id", "req_id", "symbol")),
                MassCancel: frozenset(("symbol",))}


def _problem(w: Wire) -> str:
    """Why a wire-form command is malformed (only called once the fast checks failed)."""
    cls = _COMMANDS[w[0]]
    names = cls._FIELDS
    if cls is NewOrder and len(w) == len(names) - 1:
        names = names[:-2]  # the form written before NewOrder.ord_type and stop_px existed
    elif cls is NewOrder and len(w) == len(names) - 2:
        names = names[:-3]  # the form written before NewOrder.stp existed
    if len(w) != len(names) + 1:
        return f"{cls.__name__} has {len(w) - 1} fields instead of {len(names)}"
    maybe_empty = _MAYBE_EMPTY.get(cls, frozenset())
    for name, value in zip(names, w[1:], strict=True):
        if name in maybe_empty or name in _TEXTS:
            if type(value) is not str:
                return f"{cls.__name__}.{name}={value!r:.40} is not a string"
        elif name in _STRINGS:
            if type(value) is not str or not value:
                return f"{cls.__name__}.{name}={value!r:.40} is not a non-empty string"
        elif type(value) is not int:
            return f"{cls.__name__}.{name}={value!r:.40} is not an integer"
    return f"{cls.__name__} is malformed"


class Engine:
    """Every book of one shard, the sessions trading on them, and the id counters."""

    def __init__(self, instruments: Iterable[Instrument], *, limits: Limits | None = None,
                 id_prefix: str = "", book_updates: bool = False, market_band_bps: int = 500) -> None:
        self.limits = limits or Limits()
        # A market order in continuous trading trades up to this far (basis points) from the last
        # trade price (else the reference price); the rest is cancelled.
        self.market_band_bps = market_band_bps
        # BookUpdate per changed book per batch (the service wants them; a test of order events
        # may leave them out). BookImage answers an ImageRequest either way.
        self.book_updates = book_updates
        self._keep = self.limits.done_orders
        self.id_prefix = id_prefix
        # Ids are prefix + str(counter): about 45 ns cheaper than an f-string, same text.
        self._e_prefix = id_prefix + "E"
        self._m_prefix = id_prefix + "M"
        self.books: dict[str, Book] = {i.symbol: Book(i) for i in instruments}
        self._bands = {s: b.instrument.band_ticks for s, b in self.books.items()}
        # Per symbol: (book, lowest price, highest price); one lookup on the hot path.
        self._symbols = {s: (b, *self._bands[s]) for s, b in self.books.items()}
        self._min_qty, self._max_qty = self.limits.min_qty, self.limits.max_qty
        self._max_open = self.limits.max_open_per_session
        self.sessions: dict[str, SessionState] = {}
        self.next_order = 1
        self.next_exec = 1
        self.next_match = 1
        self.commands = 0
        self.end_of_day = 0  # the last day whose EndOfDay was applied (YYYYMMDD)
        self._out: list[Out] = []
        self._dirty: dict[str, int] = {}  # symbols whose book changed in this batch -> last ts
        self._image_ts: int | None = None  # an ImageRequest in this batch: the last one's ts
        # Issue 31: phases, call books, market orders in a call, held stops, last trade prices. A
        # symbol not in PHASE_CONTINUOUS is out of ``_symbols``, so the hot path sends its orders to
        # ``_new_other`` at no cost to the others.
        self.phases: dict[str, int] = {s: PHASE_CONTINUOUS for s in self.books}
        self.last_px: dict[str, int] = {}
        self.market: dict[str, list[SpecialOrder]] = {}  # a call's market orders, in arrival order
        self.stops: dict[str, list[SpecialOrder]] = {}  # held stop orders, in arrival order (no empty list)
        self.indicative: dict[str, Uncross] = {}  # the last Indicative published per symbol in a call
        self._traded: dict[str, tuple[int, int]] = {}  # while stops are held: (lowest, highest) trade price
        # A SpecialOrder (a triggered stop-limit) has rested in a book: its fills as a resting order
        # get its OrdType and StopPx (checked once per match, not per fill, until then).
        self._specials_rest = False

    # ------------------------------------------------------------------ entry points

    def apply(self, cmd: Message | Wire) -> list[Message]:
        """Apply one command; return its events as messages (a convenience for tests and tools)."""
        result = self.apply_batch((cmd,))
        if result.malformed:
            raise MalformedCommand(result.malformed[0][1])
        return result.messages()

    def apply_batch(self, cmds: Iterable[Message | Wire]) -> BatchResult:
        """Apply commands (messages or wire-form tuples) in order.

        Market data comes after the batch, per changed book: its BookUpdate (with ``book_updates``),
        then its Depth (conflated); then, if the batch held an ImageRequest, a BookImage of every
        book, so the image is the book after the updates before it. A malformed command is left out
        and reported in ``malformed``; the others are applied.
        """
        result = BatchResult()
        self._out = out = result.events
        new, cancel, replace, end = self._new, self._cancel, self._replace, self._end
        traded = self._traded  # the same dict throughout (cleared, never replaced)
        applied = redeliveries = 0
        for cmd in cmds:
            w = cmd if type(cmd) is tuple else as_wire(cmd)
            code = w[0]
            try:
                if code == _NEW:
                    redelivered = new(w)
                elif code == _CANCEL:
                    redelivered = cancel(w)
                elif code == _REPLACE:
                    redelivered = replace(w)
                elif code == _END:
                    redelivered = end(w)
                elif code == _EOD:
                    redelivered = self._end_of_day(w)
                elif code == _STATUS:
                    redelivered = self._status(w)
                elif code == _MASS:
                    redelivered = self._mass_cancel(w)
                elif code == _IMAGE:
                    redelivered = self._image_request(w)
                elif code == _SET_PHASE:
                    redelivered = self._set_phase(w)
                else:
                    name = _NAMES.get(code, f"type code {code!r:.20}")
                    raise MalformedCommand(f"{name} is not a matcher command")
            except MalformedCommand as exc:
                result.malformed.append((cmd, str(exc)))
                continue
            applied += 1
            if redelivered:
                redeliveries += 1
            if traded:  # trades while stops are held: trigger those reached
                self._trigger_stops(w[-1] if code != _NEW else w[10])
        self.commands += applied
        result.redelivered = redeliveries
        if self._dirty:
            n = self.limits.depth_levels
            books, book_updates = self.books, self.book_updates
            dirty = self._dirty
            for symbol, ts in dirty.items():
                book = books[symbol]
                if book_updates:
                    changes = book.changes()
                    if changes:
                        out.append((None, (_BOOK_UPDATE, symbol, changes, ts)))
                else:
                    book.forget_changes()
                bids, asks = book.depth(n)
                out.append((None, (_DEPTH, symbol, bids, asks, ts)))
            self._dirty = {}
            if self.indicative:  # instruments in a call: their Indicative, when it changed
                for symbol, ts in dirty.items():
                    if symbol in self.indicative:
                        self._publish_indicative(symbol, ts)
        if self._image_ts is not None:
            ts = self._image_ts
            for symbol, book in self.books.items():
                bids, asks = book.image()
                out.append((None, (_BOOK_IMAGE, symbol, bids, asks, ts)))
            # A reader that starts at the image learns the phases too: each instrument not in
            # continuous trading restated (prev_phase = phase), then its last Indicative.
            phases, indicative = self.phases, self.indicative
            for symbol in self.books:
                phase = phases[symbol]
                if phase != PHASE_CONTINUOUS:
                    out.append((None, (_PHASE_CHANGED, symbol, phase, phase, RESTATED, ts)))
                u = indicative.get(symbol)
                if u is not None:
                    out.append((None, (_INDICATIVE, symbol, u.price, u.volume, u.imbalance_qty,
                                       u.imbalance_side, ts)))
            self._image_ts = None
        return result

    # ------------------------------------------------------------------ queries

    @property
    def resting_orders(self) -> int:
        return sum(b.resting for b in self.books.values())

    def open_orders(self, session: str) -> list[Order]:
        state = self.sessions.get(session)
        return list(state.live.values()) if state else []

    # ------------------------------------------------------------------ commands

    def _session(self, name: str) -> SessionState:
        state = self.sessions.get(name)
        if state is None:
            state = self.sessions[name] = SessionState(name, self._keep)
        return state

    def _exec_id(self) -> str:
        n = self.next_exec
        self.next_exec = n + 1
        return self._e_prefix + str(n)

    def _new(self, w: Wire) -> bool:
        n = len(w)
        if n == 12:
            _, session, clordid, symbol, side, price, qty, tif, reply_to, seq, ts, stp = w
        elif n == 14:
            _, session, clordid, symbol, side, price, qty, tif, reply_to, seq, ts, stp, ord_type, stop_px = w
            if ord_type != 2 or stop_px or tif == 2 or tif == 7:  # not a plain limit order: off the hot path
                return self._new_special(w)
        elif n == 11:  # written before NewOrder.stp existed: prevention off
            _, session, clordid, symbol, side, price, qty, tif, reply_to, seq, ts = w
            stp = STP_OFF
        else:
            raise MalformedCommand(_problem(w))
        # Type checks at half the cost of one type() per field: "|" refuses anything but integers
        # and "+" refuses to join a str with anything but a str.
        try:
            side | price | qty | tif | seq | ts | stp
            if not (type(session) is str and session + clordid + reply_to and session and clordid
                    and reply_to and type(symbol) is str):
                raise TypeError
        except TypeError:
            raise MalformedCommand(_problem(w)) from None
        if stp and stp not in _STPS:  # the gateway's own field: a bad value is a producer bug
            raise MalformedCommand(f"NewOrder.stp={stp} is not a self-trade prevention mode")
        state = self.sessions.get(session)
        if state is None:
            state = self.sessions[session] = SessionState(session, self._keep)
        seen = state.seen
        prior = seen.get(clordid)
        if prior is not None:
            if prior == seq:
                return True  # the same command delivered twice (a producer retried its write)
            self._reject(w, REJ_DUPLICATE_ORDER, f"duplicate ClOrdID {clordid} in this session")
            return False
        seen[clordid] = seq
        where = self._symbols.get(symbol)
        if where is None:
            if symbol in self.books:  # an instrument not in continuous trading
                return self._new_other(w, state, ORD_LIMIT, 0, stp)
            self._reject(w, REJ_UNKNOWN_SYMBOL, f"unknown symbol {symbol}")
            state.closed[clordid] = ST_REJECTED
            state.keep((clordid, "NONE", symbol, side, price, qty, 0, 0, ST_REJECTED))
            return False
        book, lo, hi = where
        live = state.live
        # IOC and FOK never rest, so the open-orders limit does not apply to them.
        if not (lo <= price <= hi and self._min_qty <= qty <= self._max_qty and side in (1, 2)
                and ((tif in (0, 1) and len(live) < self._max_open) or tif in (3, 4))):
            if tif in (AT_OPEN, AT_CLOSE):  # only in their call: the phase decides
                return self._new_other(w, state, ORD_LIMIT, 0, stp)
            code, text = self._why_not(book, state, side, price, qty, tif)
            self._reject(w, code, text)
            state.closed[clordid] = ST_REJECTED
            state.keep((clordid, "NONE", symbol, side, price, qty, 0, 0, ST_REJECTED))
            return False
        n = self.next_order
        self.next_order = n + 1
        order_id = self.id_prefix + str(n)
        n = self.next_exec
        self.next_exec = n + 1
        self._out.append((reply_to, (_ACCEPTED, session, clordid, order_id, symbol, side, price, qty, tif,
                                     self._e_prefix + str(n), ts)))
        self._dirty[symbol] = ts
        if tif > 1 or stp:  # IOC, FOK (At the Opening/Close: refused above) or self-trade prevention
            self._aggress(session, clordid, order_id, symbol, side, price, qty, tif, reply_to, stp, state,
                          book, ts)
            return False
        if (price >= book.ask_top) if side == 1 else (price <= book.bid_top):  # 1: BUY
            cum, cost = self._emit_fills(session, clordid, order_id, symbol, side, price, qty, reply_to, 0, 0,
                                         book.match(side, price, qty), ts)
            if cum == qty:  # filled at once: no Order object needed
                state.done.append((clordid, order_id, symbol, side, price, qty, qty, cost, ST_FILLED))
                return False
            order = Order(order_id, session, clordid, symbol, side, price, qty, tif, reply_to, state,
                          qty - cum, cum, cost)
        else:
            order = Order(order_id, session, clordid, symbol, side, price, qty, tif, reply_to, state)
        book.add(order)
        live[clordid] = order
        return False

    def _new_special(self, w: Wire) -> bool:
        """A NewOrder (wire form with ord_type and stop_px) that is not a plain limit order: checked
        like one, then ``_new_other``."""
        _, session, clordid, symbol, side, price, qty, tif, reply_to, seq, ts, stp, ord_type, stop_px = w
        try:
            side | price | qty | tif | seq | ts | stp | ord_type | stop_px
            if not (type(session) is str and session + clordid + reply_to and session and clordid
                    and reply_to and type(symbol) is str):
                raise TypeError
        except TypeError:
            raise MalformedCommand(_problem(w)) from None
        if stp and stp not in _STPS:
            raise MalformedCommand(f"NewOrder.stp={stp} is not a self-trade prevention mode")
        state = self._session(session)
        prior = state.seen.get(clordid)
        if prior is not None:
            if prior == seq:
                return True
            self._reject(w, REJ_DUPLICATE_ORDER, f"duplicate ClOrdID {clordid} in this session")
            return False
        state.seen[clordid] = seq
        if symbol not in self.books:
            self._reject(w, REJ_UNKNOWN_SYMBOL, f"unknown symbol {symbol}")
            state.closed[clordid] = ST_REJECTED
            state.keep((clordid, "NONE", symbol, side, price, qty, 0, 0, ST_REJECTED))
            return False
        return self._new_other(w, state, ord_type, stop_px, stp)

    def _refusal(self, book: Book, state: SessionState, side: int, price: int, qty: int, tif: int,
                 ord_type: int, stop_px: int) -> tuple[int, str] | None:
        """Why an order of any type cannot be taken in its instrument's phase (None: it can)."""
        phase = self.phases[book.symbol]
        name = PHASE_NAMES[phase]
        inst = book.instrument
        lo, hi = self._bands[book.symbol]
        if side not in _SIDES:
            return REJ_OTHER, f"side {side} is neither 1 (buy) nor 2 (sell)"
        if ord_type not in _ORD_TYPES:
            return (REJ_OTHER, f"order type {ord_type} is not accepted: only market (1), limit (2), stop (3) "
                               "or stop limit (4)")
        if tif not in _ALL_TIFS:
            return (REJ_OTHER, f"time in force {tif} is not accepted: only day (0), GTC (1), at the opening "
                               "(2), IOC (3), FOK (4) or at the close (7)")
        if not self._min_qty <= qty <= self._max_qty:
            return REJ_INCORRECT_QUANTITY, f"quantity {qty} is outside {self._min_qty} to {self._max_qty}"
        if ord_type in (ORD_MARKET, ORD_STOP):
            if price:
                return REJ_OTHER, f"a {_TYPE_NAMES[ord_type]} order carries no price (got {price} ticks)"
        elif not lo <= price <= hi:
            return (REJ_OTHER, f"price {inst.to_price(price)} is outside {inst.to_price(lo)} to "
                               f"{inst.to_price(hi)} (20% either side of the reference "
                               f"{inst.to_price(inst.reference_ticks)})")
        if ord_type in (ORD_STOP, ORD_STOP_LIMIT):
            if not lo <= stop_px <= hi:
                return (REJ_OTHER, f"stop price {inst.to_price(stop_px)} is outside {inst.to_price(lo)} to "
                                   f"{inst.to_price(hi)}")
            if tif in (AT_OPEN, AT_CLOSE, IOC, FOK):
                return REJ_OTHER, f"a stop order's time in force is Day or GTC, not {_TIF_NAMES[tif]}"
        elif stop_px:
            return REJ_OTHER, f"a {_TYPE_NAMES[ord_type]} order carries no stop price"
        if phase == PHASE_CLOSED:
            return (REJ_EXCHANGE_CLOSED, f"{book.symbol} is closed: orders are taken from the opening call "
                                         "(PRE_OPEN) on")
        if tif == AT_OPEN and phase != PHASE_PRE_OPEN:
            return (REJ_OTHER,
                    f"At the Opening orders are taken in the opening call only; {book.symbol} is {name}")
        if tif == AT_CLOSE and phase != PHASE_PRE_CLOSE:
            return (REJ_OTHER,
                    f"At the Close orders are taken in the closing call only; {book.symbol} is {name}")
        if tif in (IOC, FOK) and phase in CALL_PHASES:
            return (REJ_OTHER, f"{_TIF_NAMES[tif]} orders cannot be taken in a call ({book.symbol} is "
                               f"{name}): nothing trades until the auction")
        rests = tif not in (IOC, FOK) and not (ord_type == ORD_MARKET and phase == PHASE_CONTINUOUS)
        if rests and len(state.live) >= self._max_open:
            return (REJ_ORDER_EXCEEDS_LIMIT, f"this session already has {len(state.live)} open orders, the "
                                             f"limit is {self.limits.max_open_per_session}")
        return None

    def _new_other(self, w: Wire, state: SessionState, ord_type: int, stop_px: int, stp: int) -> bool:
        """A new order that is not a plain limit order in continuous trading (its ClOrdID is taken)."""
        _, session, clordid, symbol, side, price, qty, tif, reply_to, _seq, ts = w[:11]
        book = self.books[symbol]
        why = self._refusal(book, state, side, price, qty, tif, ord_type, stop_px)
        if why is not None:
            self._out.append((reply_to, (_REJECTED, session, clordid, symbol, side, price, qty, why[0],
                                         why[1], self._exec_id(), ts, ord_type, stop_px)))
            state.closed[clordid] = ST_REJECTED
            state.keep((clordid, "NONE", symbol, side, price, qty, 0, 0, ST_REJECTED))
            return False
        n = self.next_order
        self.next_order = n + 1
        order_id = self.id_prefix + str(n)
        self._out.append((reply_to, (_ACCEPTED, session, clordid, order_id, symbol, side, price, qty, tif,
                                     self._exec_id(), ts, ord_type, stop_px)))
        if ord_type in (ORD_STOP, ORD_STOP_LIMIT):
            held = SpecialOrder(order_id, session, clordid, symbol, side, price, qty, tif, reply_to, state,
                                stp=stp, ord_type=ord_type, stop_px=stop_px, where=HELD)
            self.stops.setdefault(symbol, []).append(held)  # a trade after this one triggers it
            state.live[clordid] = held
            return False
        if ord_type == ORD_LIMIT:
            order = Order(order_id, session, clordid, symbol, side, price, qty, tif, reply_to, state, stp=stp)
        else:
            order = SpecialOrder(order_id, session, clordid, symbol, side, price, qty, tif, reply_to, state,
                                 stp=stp, ord_type=ord_type, stop_px=stop_px, where=IN_BOOK)
        self._enter(order, ts)
        return False

    def _enter(self, order: Order, ts: int, kind: int = -1) -> None:
        """An accepted (or just triggered) order meets its book in the instrument's phase. ``kind``:
        how it trades (ORD_MARKET or ORD_LIMIT; a triggered stop's own type is ORD_STOP/_LIMIT)."""
        symbol = order.symbol
        book = self.books[symbol]
        phase = self.phases[symbol]
        state: SessionState = order.owner
        self._dirty[symbol] = ts
        if kind < 0:
            kind = order.ord_type
        if phase in CALL_PHASES:  # nothing trades: the order waits for the auction
            if kind == ORD_MARKET:
                order.where = IN_MARKET  # type: ignore[misc]
                self.market.setdefault(symbol, []).append(order)  # type: ignore[arg-type]
            else:
                book.add(order)
                if type(order) is not Order:
                    self._specials_rest = True
            state.live[order.clordid] = order
            return
        if kind == ORD_MARKET:  # continuous: up to the protection band, the rest cancelled
            ref = self.last_px.get(symbol, book.instrument.reference_ticks)
            band = ref * self.market_band_bps // 10000
            limit = ref + band if order.side == BUY else ref - band
            start = len(self._out)
            cum = cost = 0
            if book.crosses(order.side, limit):
                cum, cost, _stopper = self._trade_to(order, limit, ts)
            self._tag(start, order)
            order.cum, order.cost, order.leaves = cum, cost, order.qty - cum
            if order.leaves:
                inst = book.instrument
                self._close_order(order, ST_CANCELED)
                self._cancelled(order, f"market order: no more liquidity within the protection band "
                                       f"({self.market_band_bps} bps of {inst.to_price(ref)}: "
                                       f"{inst.to_price(limit)}); remainder cancelled", ts)
            else:
                self._close_order(order, ST_FILLED)
            return
        start = len(self._out)
        stopper = self._fill(order, ts) if book.crosses(order.side, order.price) else None
        self._tag(start, order)
        if order.leaves and (stopper is not None or order.tif in (IOC, FOK)):
            self._close_order(order, ST_CANCELED)
            self._cancelled(order, _stp_aggressor_text(order.stp, stopper) if stopper is not None
                            else "IOC: remainder cancelled", ts)
        elif order.leaves:
            book.add(order)
            state.live[order.clordid] = order
            if type(order) is not Order:
                self._specials_rest = True
        else:
            self._close_order(order, ST_FILLED)

    def _trade_to(self, order: Order, limit: int, ts: int) -> tuple[int, int, Order | None]:
        """Match ``order`` (a market order) against its book up to ``limit``; its reports say price 0."""
        return self._trade(order.session, order.clordid, order.order_id, order.symbol, order.side, limit,
                           order.qty, order.reply_to, 0, 0, order.stp, ts)

    def _tag(self, start: int, order: Order) -> None:
        """Give the order's own reports from ``start`` on its OrdType and StopPx (a special order)."""
        if order.ord_type == ORD_LIMIT and not order.stop_px:
            return
        out = self._out
        for i in range(start, len(out)):
            dest, ev = out[i]
            if ev[0] == _FILLED and ev[1] == order.session and ev[3] == order.order_id:
                # the taker's price field said its matching limit: the order's own price (0: market)
                out[i] = (dest, (*ev[:6], order.price, *ev[7:], order.ord_type, order.stop_px))
            elif ev[0] == _CANCELLED and ev[1] == order.session and ev[4] == order.order_id:
                out[i] = (dest, (*ev, order.ord_type, order.stop_px))

    def _close_order(self, order: Order, status: int) -> None:
        """``order`` (out of any book) is done: out of its session's live orders, into its done ones."""
        state: SessionState = order.owner
        state.live.pop(order.clordid, None)
        if status != ST_FILLED:
            state.closed[order.clordid] = status
        state.keep(order)

    def _take_out(self, order: Order) -> None:
        """Take a waiting order out of wherever it waits (the book, a call's market orders, held stops)."""
        where = order.where
        if where == IN_BOOK:
            self.books[order.symbol].remove(order)
        elif where == IN_MARKET:
            self.market[order.symbol].remove(order)  # type: ignore[arg-type]
        else:
            held = self.stops[order.symbol]
            held.remove(order)  # type: ignore[arg-type]
            if not held:
                del self.stops[order.symbol]

    def _why_not(self, book: Book, state: SessionState, side: int, price: int, qty: int,
                 tif: int) -> tuple[int, str]:
        limits = self.limits
        inst = book.instrument
        lo, hi = self._bands[book.symbol]
        if side not in _SIDES:
            return REJ_OTHER, f"side {side} is neither 1 (buy) nor 2 (sell)"
        if tif not in _TIFS:
            return (REJ_OTHER, f"time in force {tif} is not accepted: only day (0), GTC (1), at the opening "
                               "(2), IOC (3), FOK (4) or at the close (7)")
        if not limits.min_qty <= qty <= limits.max_qty:
            return (REJ_INCORRECT_QUANTITY,
                    f"quantity {qty} is outside {limits.min_qty} to {limits.max_qty}")
        if not lo <= price <= hi:
            ref = inst.to_price(inst.reference_ticks)
            return (REJ_OTHER, f"price {inst.to_price(price)} is outside {inst.to_price(lo)} to "
                               f"{inst.to_price(hi)} (20% either side of the reference {ref})")
        return (REJ_ORDER_EXCEEDS_LIMIT,
                f"this session already has {len(state.live)} open orders, the limit is "
                f"{limits.max_open_per_session}")

    def _aggress(self, session: str, clordid: str, order_id: str, symbol: str, side: int, price: int,
                 qty: int, tif: int, reply_to: str, stp: int, state: SessionState, book: Book,
                 ts: int) -> None:
        """The rest of ``_new`` for an IOC or FOK order, or one with self-trade prevention."""
        cum = cost = 0
        why = ""
        if book.crosses(side, price):
            if tif == FOK and book.fillable(side, price, qty, session, stp) < qty:
                why = _fok_text(book, qty, price)
            else:
                cum, cost, stopper = self._trade(session, clordid, order_id, symbol, side, price, qty,
                                                 reply_to, 0, 0, stp, ts)
                if stopper is not None:
                    why = _stp_aggressor_text(stp, stopper)
        elif tif == FOK:
            why = _fok_text(book, qty, price)
        if cum == qty:
            state.done.append((clordid, order_id, symbol, side, price, qty, qty, cost, ST_FILLED))
            return
        if not why and tif > GTC:
            why = "IOC: remainder cancelled" if tif == IOC else _fok_text(book, qty, price)
        if why:
            state.closed[clordid] = ST_CANCELED
            state.done.append((clordid, order_id, symbol, side, price, qty, cum, cost, ST_CANCELED))
            self._out.append((reply_to, (_CANCELLED, session, clordid, clordid, order_id, symbol, side, price,
                                         qty, cum, cost, why, self._exec_id(), ts)))
            return
        order = Order(order_id, session, clordid, symbol, side, price, qty, tif, reply_to, state,
                      qty - cum, cum, cost, stp)
        book.add(order)
        state.live[clordid] = order

    def _trade(self, t_session: str, t_clordid: str, t_oid: str, symbol: str, t_side: int, t_price: int,
               t_qty: int, t_rt: str, cum: int, cost: int, stp: int,
               ts: int) -> tuple[int, int, Order | None]:
        """Match an incoming order (``stp``: its self-trade prevention) and emit what happened.

        Returns its cum and cost after the fills, and the resting order of its own session that
        stopped it (self-trade prevention), if one did.
        """
        book = self.books[symbol]
        leaves = t_qty - cum
        if not stp:
            cum, cost = self._emit_fills(t_session, t_clordid, t_oid, symbol, t_side, t_price, t_qty, t_rt,
                                         cum, cost, book.match(t_side, t_price, leaves), ts)
            return cum, cost, None
        entries, stopper = book.match_stp(t_side, t_price, leaves, t_session, stp)
        run: list[Fill] = []
        for entry in entries:
            if entry[1]:
                run.append(entry)
                continue
            if run:  # the fills before this cancel, in turn
                cum, cost = self._emit_fills(t_session, t_clordid, t_oid, symbol, t_side, t_price, t_qty,
                                             t_rt, cum, cost, run, ts)
                run = []
            maker = entry[0]
            owner = maker.owner
            del owner.live[maker.clordid]
            owner.closed[maker.clordid] = ST_CANCELED
            owner.keep(maker)
            self._cancelled(maker, f"self-trade prevention: cancelled, it would have traded with {t_clordid} "
                                   "of the same session", ts)
        if run:
            cum, cost = self._emit_fills(t_session, t_clordid, t_oid, symbol, t_side, t_price, t_qty, t_rt,
                                         cum, cost, run, ts)
        return cum, cost, stopper

    def _cancelled(self, order: Order, text: str, ts: int) -> None:
        """Tell the owner of ``order`` (already out of its book) that it is cancelled, and why."""
        ev: Wire = (_CANCELLED, order.session, order.clordid, order.clordid, order.order_id, order.symbol,
                    order.side, order.price, order.qty, order.cum, order.cost, text, self._exec_id(), ts)
        if type(order) is not Order:
            ev = (*ev, order.ord_type, order.stop_px)
        self._out.append((order.reply_to, ev))

    def _reject(self, w: Wire, code: int, text: str) -> None:
        session, clordid, symbol, side, price, qty, reply_to, ts = (w[1], w[2], w[3], w[4], w[5], w[6], w[8],
                                                                      w[10])
        self._out.append((reply_to, (_REJECTED, session, clordid, symbol, side, price, qty, code, text,
                                     self._exec_id(), ts)))

    def _fill(self, taker: Order, ts: int) -> Order | None:
        """Match a resting-capable order that trades again (a replace); update it; return its stopper."""
        cum, cost, stopper = self._trade(taker.session, taker.clordid, taker.order_id, taker.symbol,
                                         taker.side, taker.price, taker.qty, taker.reply_to, taker.cum,
                                         taker.cost, taker.stp, ts)
        taker.cum, taker.cost, taker.leaves = cum, cost, taker.qty - cum
        return stopper

    def _emit_fills(self, t_session: str, t_clordid: str, t_oid: str, symbol: str, t_side: int,
                    t_price: int, t_qty: int, t_rt: str, cum: int, cost: int, fills: list[Fill],
                    ts: int) -> tuple[int, int]:
        """``_fill`` from the taker's fields (a new order needs no Order if it fills at once).

        Returns the taker's cum and cost after the fills.
        """
        out = self._out
        append = out.append
        e_prefix, m_prefix = self._e_prefix, self._m_prefix
        n_exec, n_match = self.next_exec, self.next_match
        for maker, qty, px in fills:
            match_id = m_prefix + str(n_match)
            n_match += 1
            cum += qty
            cost += qty * px
            append((t_rt, (_FILLED, t_session, t_clordid, t_oid, symbol, t_side, t_price, t_qty, px,
                           qty, cum, t_qty - cum, cost, match_id, e_prefix + str(n_exec), ts)))
            leaves = maker.leaves
            append((maker.reply_to, (_FILLED, maker.session, maker.clordid, maker.order_id, symbol,
                                     maker.side, maker.price, maker.qty, px, qty, maker.cum,
                                     leaves, maker.cost, match_id, e_prefix + str(n_exec + 1), ts)))
            n_exec += 2
            append((None, (_TRADE, symbol, px, qty, match_id, t_side, ts)))
            if not leaves:  # done: out of the session's live orders, into its done ones
                owner = maker.owner
                del owner.live[maker.clordid]
                owner.done.append(maker)
        self.next_exec, self.next_match = n_exec, n_match
        if fills:
            self.last_px[symbol] = px
            if self.stops:
                self._note_trades(symbol, fills[0][2], px)
            if self._specials_rest:
                self._tag_makers(fills)
        return cum, cost

    def _tag_makers(self, fills: list[Fill]) -> None:
        """Give the Filled of each special resting order among ``fills`` (just emitted, three events
        per fill: taker's, maker's, Trade) its OrdType and StopPx."""
        out = self._out
        start = len(out) - 3 * len(fills)
        for i, (maker, _, _) in enumerate(fills):
            if type(maker) is not Order:
                dest, ev = out[start + 3 * i + 1]
                out[start + 3 * i + 1] = (dest, (*ev, maker.ord_type, maker.stop_px))

    def _note_trades(self, symbol: str, first: int, last: int) -> None:
        """Trades from ``first`` to ``last`` happened while stops are held: remember their range."""
        lo, hi = (first, last) if first <= last else (last, first)
        seen = self._traded.get(symbol)
        if seen is not None:
            lo, hi = min(lo, seen[0]), max(hi, seen[1])
        self._traded[symbol] = (lo, hi)

    def _cancel_reject(self, session: str, clordid: str, orig: str, reply_to: str, ts: int,
                       state: SessionState, response_to: int, reason: int | None = None,
                       text: str = "") -> None:
        order = state.live.get(orig)
        if order is not None:
            status = ST_PARTIAL if order.cum else ST_NEW
            order_id = order.order_id
        elif orig in state.seen and state.closed.get(orig) != NOT_AN_ORDER:
            status = state.closed.get(orig, ST_FILLED)
            order_id = "NONE"
            if reason is None:
                reason = CXL_TOO_LATE
                text = f"order {orig} is no longer open ({_STATUS_TEXT.get(status, status)})"
        else:
            status = ST_REJECTED
            order_id = "NONE"
            if reason is None:
                reason = CXL_UNKNOWN_ORDER
                text = f"unknown order {orig}"
        self._out.append((reply_to, (_CANCEL_REJECTED, session, clordid, orig, order_id, response_to,
                                     reason if reason is not None else CXL_OTHER, status, text, ts)))

    def _cancel(self, w: Wire) -> bool:
        if len(w) != 9:
            raise MalformedCommand(_problem(w))
        _, session, clordid, orig, symbol, side, reply_to, seq, ts = w
        if not (type(session) is str and type(clordid) is str and type(orig) is str and type(symbol) is str
                and type(side) is int and type(reply_to) is str and type(seq) is int and type(ts) is int
                and session and clordid and orig and reply_to):
            raise MalformedCommand(_problem(w))
        state = self.sessions.get(session)
        if state is None:
            state = self.sessions[session] = SessionState(session, self._keep)
        seen = state.seen
        prior = seen.get(clordid)
        if prior is not None:
            if prior == seq:
                return True
            self._cancel_reject(session, clordid, orig, reply_to, ts, state, RESPONSE_TO_CANCEL,
                                CXL_DUPLICATE_CLORDID, f"duplicate ClOrdID {clordid} in this session")
            return False
        seen[clordid] = seq
        closed = state.closed
        closed[clordid] = NOT_AN_ORDER
        live = state.live
        order = live.get(orig)
        if order is None:
            self._cancel_reject(session, clordid, orig, reply_to, ts, state, RESPONSE_TO_CANCEL)
            return False
        o_symbol, o_side = order.symbol, order.side
        if o_symbol != symbol or o_side != side:
            self._cancel_reject(session, clordid, orig, reply_to, ts, state, RESPONSE_TO_CANCEL, CXL_OTHER,
                                f"symbol/side {symbol}/{side} differ from the order's "
                                f"{o_symbol}/{o_side}")
            return False
        if type(order) is not Order:  # a market order of a call, a held stop, a triggered stop-limit
            self._take_out(order)
            del live[orig]
            closed[orig] = ST_CANCELED
            state.keep(order)
            self._out.append((reply_to, (_CANCELLED, session, clordid, orig, order.order_id, o_symbol,
                                         o_side, order.price, order.qty, order.cum, order.cost, "",
                                         self._exec_id(), ts, order.ord_type, order.stop_px)))
            self._dirty[o_symbol] = ts
            return False
        self.books[o_symbol].remove(order)
        del live[orig]
        closed[orig] = ST_CANCELED
        state.keep(order)
        n = self.next_exec
        self.next_exec = n + 1
        self._out.append((reply_to, (_CANCELLED, session, clordid, orig, order.order_id, o_symbol,
                                     o_side, order.price, order.qty, order.cum, order.cost, "",
                                     self._e_prefix + str(n), ts)))
        self._dirty[o_symbol] = ts
        return False

    def _replace(self, w: Wire) -> bool:
        if len(w) != 11:
            raise MalformedCommand(_problem(w))
        _, session, clordid, orig, symbol, side, price, qty, reply_to, seq, ts = w
        if not (type(session) is str and type(clordid) is str and type(orig) is str and type(symbol) is str
                and type(side) is int and type(price) is int and type(qty) is int and type(reply_to) is str
                and type(seq) is int and type(ts) is int and session and clordid and orig and reply_to):
            raise MalformedCommand(_problem(w))
        state = self._session(session)
        prior = state.seen.get(clordid)
        if prior is not None:
            if prior == seq:
                return True
            self._cancel_reject(session, clordid, orig, reply_to, ts, state, RESPONSE_TO_REPLACE,
                                CXL_DUPLICATE_CLORDID, f"duplicate ClOrdID {clordid} in this session")
            return False
        state.seen[clordid] = seq
        state.closed[clordid] = NOT_AN_ORDER  # until the replace succeeds and it names the order
        order = state.live.get(orig)
        if order is None:
            self._cancel_reject(session, clordid, orig, reply_to, ts, state, RESPONSE_TO_REPLACE)
            return False
        book = self.books[order.symbol]
        inst = book.instrument
        lo, hi = self._bands[order.symbol]
        limits = self.limits
        problem = None
        phase = self.phases[order.symbol]
        if order.symbol != symbol or order.side != side:
            problem = f"symbol/side {symbol}/{side} differ from the order's {order.symbol}/{order.side}"
        elif type(order) is not Order:
            problem = (f"a {_TYPE_NAMES[order.ord_type]} order cannot be replaced here: cancel it and send a "
                       "new one")
        elif phase == PHASE_CLOSED:
            problem = f"{order.symbol} is closed: orders can be cancelled, not replaced"
        elif not lo <= price <= hi:
            problem = (f"price {inst.to_price(price)} is outside {inst.to_price(lo)} to "
                       f"{inst.to_price(hi)}")
        elif not limits.min_qty <= qty <= limits.max_qty:
            problem = f"quantity {qty} is outside {limits.min_qty} to {limits.max_qty}"
        elif qty <= order.cum:
            problem = f"quantity {qty} is not above the {order.cum} already filled"
        if problem:
            self._cancel_reject(session, clordid, orig, reply_to, ts, state, RESPONSE_TO_REPLACE, CXL_OTHER,
                                problem)
            return False
        # CME rule: only a lower (or unchanged) quantity at the same price keeps time priority.
        keeps_priority = price == order.price and qty <= order.qty
        if keeps_priority:
            book.reduce(order, qty - order.cum)
        else:
            book.remove(order)
            order.price = price
            order.leaves = qty - order.cum
        order.qty = qty
        order.clordid = clordid
        del state.live[orig]
        del state.closed[clordid]
        state.closed[orig] = ST_REPLACED
        state.renamed[orig] = clordid
        self._out.append((reply_to, (_REPLACED, session, clordid, orig, order.order_id, order.symbol,
                                     order.side, price, qty, order.cum, order.leaves, order.cost,
                                     self._exec_id(), ts)))
        if not keeps_priority:
            stopper = (self._fill(order, ts) if book.crosses(order.side, price) and phase == PHASE_CONTINUOUS
                       else None)
            if stopper is not None and order.leaves:
                state.closed[clordid] = ST_CANCELED
                state.keep(order)
                self._out.append((reply_to, (_CANCELLED, session, clordid, clordid, order.order_id,
                                             order.symbol, order.side, price, qty, order.cum, order.cost,
                                             _stp_aggressor_text(order.stp, stopper), self._exec_id(), ts)))
                self._dirty[order.symbol] = ts
                return False
            if order.leaves:
                book.add(order)
        if order.leaves:
            state.live[clordid] = order
        else:
            state.keep(order)  # filled at once at its new price
        self._dirty[order.symbol] = ts
        return False

    def _end(self, w: Wire) -> bool:
        if len(w) != 4:
            raise MalformedCommand(_problem(w))
        _, session, reply_to, ts = w
        if not (type(session) is str and type(reply_to) is str and type(ts) is int and session and reply_to):
            raise MalformedCommand(_problem(w))
        state = self.sessions.pop(session, None)
        if state is None:
            return False
        for order in state.live.values():
            self._take_out(order)
            self._cancelled(order, "session ended", ts)
            self._dirty[order.symbol] = ts
        return False

    def _end_of_day(self, w: Wire) -> bool:
        if len(w) != 3:
            raise MalformedCommand(_problem(w))
        _, day, ts = w
        if not (type(day) is int and type(ts) is int):
            raise MalformedCommand(_problem(w))
        if day <= self.end_of_day:
            return False  # done already: another gateway, or a gateway restarting, says it again
        self.end_of_day = day
        day_orders = [o for symbol in self.books for o in self._waiting(symbol) if o.tif == DAY]
        for order in day_orders:
            self._withdraw(order, "end of day", ts)
        return False

    def _waiting(self, symbol: str) -> list[Order]:
        """Every order of ``symbol`` that waits: the book's, then a call's market orders, then held stops."""
        return [*self.books[symbol].orders(), *self.market.get(symbol, ()), *self.stops.get(symbol, ())]

    def _withdraw(self, order: Order, text: str, ts: int) -> None:
        """The exchange cancels a resting order of a live session (end of day, mass cancel)."""
        self._take_out(order)
        state = order.owner
        del state.live[order.clordid]
        state.closed[order.clordid] = ST_CANCELED
        state.keep(order)
        self._cancelled(order, text, ts)
        self._dirty[order.symbol] = ts

    def _status(self, w: Wire) -> bool:
        """StatusRequest: one StatusReport with the order's current or final state."""
        if len(w) != 10:
            raise MalformedCommand(_problem(w))
        _, session, clordid, order_id, symbol, side, req_id, reply_to, seq, ts = w
        if not (type(session) is str and type(clordid) is str and type(order_id) is str
                and type(symbol) is str and type(side) is int and type(req_id) is str
                and type(reply_to) is str and type(seq) is int and type(ts) is int
                and session and clordid and reply_to):
            raise MalformedCommand(_problem(w))
        state = self._session(session)
        key = (clordid, seq)
        if key in state.queries:
            return True  # the same request written twice by a producer that retried: answered once
        state.queries.append(key)
        report = self._find(state, clordid, order_id)
        if isinstance(report, str):
            self._out.append((reply_to, (_STATUS_REPORT, session, clordid, "NONE", symbol, side, 0, 0, 0, 0,
                                         0, ST_REJECTED, report, req_id, self._exec_id(), ts)))
            return False
        c, oid, o_symbol, o_side, price, qty, cum, cost, status, text = report
        leaves = qty - cum if status in (ST_NEW, ST_PARTIAL) else 0
        ev: Wire = (_STATUS_REPORT, session, c, oid, o_symbol, o_side, price, qty, cum, leaves, cost, status,
                    text, req_id, self._exec_id(), ts)
        special = next((o for o in (state.live.get(c), *state.done)
                        if type(o) is SpecialOrder and o.order_id == oid), None)
        if special is not None:  # a market or stop order: its OrdType and StopPx
            ev = (*ev, special.ord_type, special.stop_px)
        self._out.append((reply_to, ev))
        return False

    def _find(self, state: SessionState, clordid: str,
              order_id: str) -> str | tuple[str, str, str, int, int, int, int, int, int, str]:
        """The order a StatusRequest asks about, as (clordid, order_id, symbol, side, price, qty, cum,
        cost, OrdStatus, text), or why there is none (a text)."""
        current = clordid
        while current in state.renamed:  # a version replaced away: the order under its last ClOrdID
            current = state.renamed[current]
        order = state.live.get(current)
        rec: DoneRecord | None = None
        if order is None:
            rec = state.find_done(clordid=current)
        if order is None and rec is None and order_id:
            order = next((o for o in state.live.values() if o.order_id == order_id), None)
            if order is None:
                rec = state.find_done(order_id=order_id)
            if (order is not None or rec is not None) and clordid in state.seen:
                return f"order {order_id} is not order {clordid}"
        if order is not None:
            if order_id and order.order_id != order_id:
                return f"order {clordid} has OrderID {order.order_id}, not {order_id}"
            return (order.clordid, order.order_id, order.symbol, order.side, order.price, order.qty,
                    order.cum, order.cost, ST_PARTIAL if order.cum else ST_NEW, "")
        if rec is not None:
            if order_id and rec[1] != order_id and rec[1] != "NONE":
                return f"order {clordid} has OrderID {rec[1]}, not {order_id}"
            return (*rec, "order rejected" if rec[8] == ST_REJECTED else "")
        if current not in state.seen or state.closed.get(current) == NOT_AN_ORDER:
            if order_id:
                return f"unknown order {clordid} (OrderID {order_id})"
            return f"unknown order {clordid}"
        status = state.closed.get(current, ST_FILLED)
        return (f"order {clordid} is no longer held ({_STATUS_TEXT.get(status, status)}): the exchange keeps "
                f"the final state of a session's last {self._keep} done orders")

    def _mass_cancel(self, w: Wire) -> bool:
        """MassCancel: a MassCancelReport, then a Cancelled for each order of the scope."""
        if len(w) != 9:
            raise MalformedCommand(_problem(w))
        _, session, clordid, request_type, symbol, side, reply_to, seq, ts = w
        if not (type(session) is str and type(clordid) is str and type(request_type) is int
                and type(symbol) is str and type(side) is int and type(reply_to) is str and type(seq) is int
                and type(ts) is int and session and clordid and reply_to):
            raise MalformedCommand(_problem(w))
        state = self._session(session)
        prior = state.seen.get(clordid)
        if prior == seq:
            return True
        # An exchange id for the request, from the order counter (so ids stay deterministic).
        n = self.next_order
        self.next_order = n + 1
        request_id = self.id_prefix + "Q" + str(n)
        reason, text = MASS_REJ_OTHER, ""
        if prior is not None:
            text = f"duplicate ClOrdID {clordid} in this session"
        elif request_type not in (MASS_CANCEL_SYMBOL, MASS_CANCEL_ALL):
            text = (f"mass cancel request type {request_type} is not supported: only 1 (one symbol) or 7 "
                    "(all orders)")
        elif request_type == MASS_CANCEL_SYMBOL and symbol not in self.books:
            reason, text = MASS_REJ_UNKNOWN_SECURITY, f"unknown symbol {symbol}"
        elif side not in (0, BUY, SELL):
            text = f"side {side} is neither 0 (both), 1 (buy) nor 2 (sell)"
        if prior is None:
            state.seen[clordid] = seq
            state.closed[clordid] = NOT_AN_ORDER
        if text:
            self._out.append((reply_to, (_MASS_CANCEL_REPORT, session, clordid, request_id, request_type, 0,
                                         reason, 0, symbol, side, text, ts)))
            return False
        one = request_type == MASS_CANCEL_SYMBOL
        hit = [o for o in state.live.values()
               if (not one or o.symbol == symbol) and (not side or o.side == side)]
        self._out.append((reply_to, (_MASS_CANCEL_REPORT, session, clordid, request_id, request_type,
                                     request_type, 0, len(hit), symbol, side, "", ts)))
        for order in hit:
            self._withdraw(order, "mass cancel", ts)
        return False

    # ------------------------------------------------------------------ phases, auctions, stops

    def _set_phase(self, w: Wire) -> bool:
        """SetPhase: each named instrument goes into the phase (an uncross when it leaves a call)."""
        if len(w) != 5:
            raise MalformedCommand(_problem(w))
        _, symbol, phase, reason, ts = w
        if not (type(symbol) is str and symbol and type(phase) is int and type(reason) is str
                and type(ts) is int):
            raise MalformedCommand(_problem(w))
        if phase not in PHASES:
            raise MalformedCommand(f"SetPhase.phase={phase} is not a phase (0 to 4)")
        if symbol != ALL_SYMBOLS and symbol not in self.books:
            return False  # another shard's instrument (the command goes to every shard)
        for sym in (self.books if symbol == ALL_SYMBOLS else (symbol,)):
            if self.phases[sym] != phase:
                self._change_phase(sym, phase, reason, ts)
        return False

    def _change_phase(self, symbol: str, phase: int, reason: str, ts: int) -> None:
        prev = self.phases[symbol]
        out = self._out
        if prev in CALL_PHASES and phase not in CALL_PHASES:
            self._uncross(symbol, prev, ts)
        self.phases[symbol] = phase
        if phase == PHASE_CONTINUOUS:
            book = self.books[symbol]
            self._symbols[symbol] = (book, *self._bands[symbol])
        else:
            self._symbols.pop(symbol, None)
        if phase == PHASE_CLOSED:  # the day ends for this instrument: Day orders go, GTC orders stay
            for order in [o for o in self._waiting(symbol) if o.tif == DAY]:
                self._withdraw(order, f"{symbol} closed: Day order cancelled", ts)
        out.append((None, (_PHASE_CHANGED, symbol, phase, prev, reason, ts)))
        if phase in CALL_PHASES:
            self._publish_indicative(symbol, ts)
        if self._traded:
            self._trigger_stops(ts)

    def _call_uncross(self, symbol: str) -> Uncross:
        book = self.books[symbol]
        market = self.market.get(symbol, ())
        mb = sum(o.leaves for o in market if o.side == BUY)
        ms = sum(o.leaves for o in market if o.side == SELL)
        bids = [(lv.price, lv.qty) for lv in book.bids.values()]
        asks = [(lv.price, lv.qty) for lv in book.asks.values()]
        return uncross_price(bids, asks, mb, ms, self.last_px.get(symbol, book.instrument.reference_ticks))

    def _publish_indicative(self, symbol: str, ts: int) -> None:
        """An Indicative for ``symbol`` (in a call) when the uncross it would have now changed."""
        u = self._call_uncross(symbol)
        if self.indicative.get(symbol) != u:
            self.indicative[symbol] = u
            self._out.append((None, (_INDICATIVE, symbol, u.price, u.volume, u.imbalance_qty,
                                     u.imbalance_side, ts)))

    def _priority(self, symbol: str, side: int, price: int) -> list[Order]:
        """The orders of ``side`` that execute at ``price``, in priority: market orders in arrival order,
        then limit orders best price first, oldest first."""
        book = self.books[symbol]
        out: list[Order] = [o for o in self.market.get(symbol, ()) if o.side == side]
        for level in book.levels(side):
            if (level.price < price) if side == BUY else (level.price > price):
                break
            out.extend(level)
        return out

    def _allocate(self, symbol: str, orders: list[Order], volume: int) -> list[tuple[Order, int]]:
        """How much of ``volume`` each order executes: in turn; the last price level reached shares
        its part pro-rata on a pro-rata instrument."""
        out: list[tuple[Order, int]] = []
        left = volume
        pro_rata = self.books[symbol].pro_rata
        i = 0
        while left and i < len(orders):
            o = orders[i]
            if not pro_rata or o.where != IN_BOOK:
                take = min(o.leaves, left)
                out.append((o, take))
                left -= take
                i += 1
                continue
            # a pro-rata instrument's price level: whole if it fits, else shared
            j = i
            while j < len(orders) and orders[j].where == IN_BOOK and orders[j].price == o.price:
                j += 1
            level = orders[i:j]
            total = sum(x.leaves for x in level)
            shares = [x.leaves for x in level] if total <= left else allocate(left, [x.leaves for x in level])
            for x, q in zip(level, shares, strict=True):
                if q:
                    out.append((x, q))
            left -= sum(shares)
            i = j
        return out

    def _uncross(self, symbol: str, call: int, ts: int) -> None:
        """End the call ``call`` of ``symbol``: execute its book at the uncross price, then cancel what
        the auction leaves of At the Opening / At the Close orders and of market orders."""
        u = self._call_uncross(symbol)
        book = self.books[symbol]
        out = self._out
        if u.volume:
            px = u.price
            buys = self._allocate(symbol, self._priority(symbol, BUY, px), u.volume)
            sells = self._allocate(symbol, self._priority(symbol, SELL, px), u.volume)
            bi = si = 0
            b_left = buys[0][1]
            s_left = sells[0][1]
            while bi < len(buys) and si < len(sells):
                buy, sell = buys[bi][0], sells[si][0]
                qty = min(b_left, s_left)
                match_id = self._m_prefix + str(self.next_match)
                self.next_match += 1
                for o in (buy, sell):
                    self._execute(o, qty, px, match_id, ts)
                out.append((None, (_TRADE, symbol, px, qty, match_id, AUCTION_AGGRESSOR, ts)))
                b_left -= qty
                s_left -= qty
                if not b_left:
                    bi += 1
                    b_left = buys[bi][1] if bi < len(buys) else 0
                if not s_left:
                    si += 1
                    s_left = sells[si][1] if si < len(sells) else 0
            self.last_px[symbol] = px
            if self.stops:
                self._note_trades(symbol, px, px)
            self._dirty[symbol] = ts
        tif_left = AT_OPEN if call == PHASE_PRE_OPEN else AT_CLOSE if call == PHASE_PRE_CLOSE else -1
        auction = {PHASE_PRE_OPEN: "opening", PHASE_PRE_CLOSE: "closing", PHASE_HALTED: "resume"}[call]
        for o in [o for o in (*book.orders(), *self.market.get(symbol, ())) if o.tif == tif_left]:
            self._withdraw(o, f"{_TIF_NAMES[tif_left]}: not executed in the {auction} auction, cancelled", ts)
        for o in list(self.market.get(symbol, ())):
            self._withdraw(o, f"market order: not executed in the {auction} auction, remainder cancelled", ts)
        self.market.pop(symbol, None)
        self._flush_book(symbol)
        self.indicative.pop(symbol, None)
        out.append((None, (_INDICATIVE, symbol, 0, 0, 0, 0, ts)))

    def _execute(self, o: Order, qty: int, px: int, match_id: str, ts: int) -> None:
        """One side of an uncross trade: ``o`` executes ``qty`` at ``px``; its report."""
        if o.where == IN_BOOK:
            book = self.books[o.symbol]
            if qty == o.leaves:
                book.remove(o)
                o.leaves = 0
            else:
                book.reduce(o, o.leaves - qty)
        else:
            o.leaves -= qty
        o.cum += qty
        o.cost += qty * px
        ev: Wire = (_FILLED, o.session, o.clordid, o.order_id, o.symbol, o.side, o.price, o.qty, px, qty,
                    o.cum, o.leaves, o.cost, match_id, self._exec_id(), ts)
        if type(o) is not Order:
            ev = (*ev, o.ord_type, o.stop_px)
        self._out.append((o.reply_to, ev))
        if not o.leaves:
            if o.where == IN_MARKET:
                self.market[o.symbol].remove(o)  # type: ignore[arg-type]
            state: SessionState = o.owner
            del state.live[o.clordid]
            state.keep(o)

    def _flush_book(self, symbol: str) -> None:
        """The market data of ``symbol``'s book now (BookUpdate, Depth), not at the batch's end."""
        ts = self._dirty.pop(symbol, None)
        if ts is None:
            return
        book = self.books[symbol]
        if self.book_updates:
            changes = book.changes()
            if changes:
                self._out.append((None, (_BOOK_UPDATE, symbol, changes, ts)))
        else:
            book.forget_changes()
        bids, asks = book.depth(self.limits.depth_levels)
        self._out.append((None, (_DEPTH, symbol, bids, asks, ts)))

    def _trigger_stops(self, ts: int) -> None:
        """Held stops reached by the trades since the last look enter their books, in arrival order
        (their trades may trigger more: until none is reached)."""
        while self._traded:
            traded = dict(self._traded)
            self._traded.clear()
            for symbol, (lo, hi) in traded.items():
                held = self.stops.get(symbol)
                if not held or self.phases[symbol] == PHASE_CLOSED:
                    continue
                reached = [o for o in held if (hi >= o.stop_px if o.side == BUY else lo <= o.stop_px)]
                for o in reached:
                    held.remove(o)
                    if not held:
                        del self.stops[symbol]
                    o.where = IN_BOOK
                    self._out.append((o.reply_to, (_TRIGGERED, o.session, o.clordid, o.order_id, o.symbol,
                                                   o.side, o.price, o.qty, o.ord_type, o.stop_px,
                                                   self._exec_id(), ts)))
                    # its reports keep OrdType 3/4 and StopPx; it trades as a market / limit order
                    self._enter(o, ts, ORD_MARKET if o.ord_type == ORD_STOP else ORD_LIMIT)

    def _image_request(self, w: Wire) -> bool:
        """ImageRequest: a BookImage of every book after this batch's BookUpdates (a query: a
        request written twice gives a second image, which is just as exact)."""
        if len(w) != 3:
            raise MalformedCommand(_problem(w))
        _, reply_to, ts = w
        if not (type(reply_to) is str and type(ts) is int and reply_to):
            raise MalformedCommand(_problem(w))
        self._image_ts = ts
        return False

    # ------------------------------------------------------------------ snapshot

    def snapshot(self, shard: str, last_id: str, ts: int) -> MatcherSnapshot:
        """The whole state, as of the orders-stream entry ``last_id``.

        Per session: seen ClOrdIDs and their MsgSeqNums, closed ClOrdIDs and their OrdStatus, open
        ClOrdIDs, done orders kept (DoneRecords, oldest first), ClOrdIDs replaced away and what
        replaced them, recent status requests. What market data showed is the books themselves at a
        batch's end, so it needs no room here.
        """
        orders = tuple(
            _order_item(o) for symbol, book in self.books.items()
            for o in (*book.orders(), *self.market.get(symbol, ()))
        )
        phases = []
        for symbol, phase in self.phases.items():
            u = self.indicative.get(symbol)
            if phase != PHASE_CONTINUOUS or u is not None:
                ind = (u.price, u.volume, u.imbalance_qty, u.imbalance_side) if u else ()
                phases.append((symbol, phase, ind))
        stops = tuple(_order_item(o) for held in self.stops.values() for o in held)
        sessions = tuple(
            (s.name, tuple(s.seen), tuple(s.seen.values()), tuple(s.closed), tuple(s.closed.values()),
             tuple(s.live), s.done_records(), tuple(s.renamed), tuple(s.renamed.values()), tuple(s.queries))
            for s in self.sessions.values()
        )
        return MatcherSnapshot(shard, last_id, self.next_order, self.next_exec, self.next_match, orders,
                               sessions, ts, self.end_of_day, tuple(phases), stops,
                               tuple(self.last_px.items()))

    @classmethod
    def restore(cls, snap: MatcherSnapshot, instruments: Iterable[Instrument], *,
                limits: Limits | None = None, id_prefix: str = "", book_updates: bool = False,
                market_band_bps: int = 500) -> Engine:
        """An engine in exactly the state ``snap`` recorded (it must be this shard's).

        Market data carries on from the restored books: the next BookUpdate is relative to them.
        """
        engine = cls(instruments, limits=limits, id_prefix=id_prefix, book_updates=book_updates,
                     market_band_bps=market_band_bps)
        engine.next_order, engine.next_exec, engine.next_match = (
            snap.next_order, snap.next_exec, snap.next_match)
        engine.end_of_day = snap.end_of_day
        for item in snap.sessions:
            # 10 items; 6 in a snapshot written before the done orders, replaced ClOrdIDs and status
            # requests were kept (none then).
            name, seen_ids, seen_seqs, closed_ids, closed_status, _ = item[:6]
            done, renamed_ids, renamed_to, queries = item[6:] if len(item) == 10 else ((), (), (), ())
            state = engine.sessions[name] = SessionState(name, engine._keep)
            state.seen = dict(zip(seen_ids, seen_seqs, strict=True))
            state.closed = dict(zip(closed_ids, closed_status, strict=True))
            for rec in done[-engine._keep:]:
                state.keep(tuple(rec))
            state.renamed = dict(zip(renamed_ids, renamed_to, strict=True))
            state.queries.extend(tuple(q) for q in queries)
        by_key: dict[tuple[str, str], Order] = {}
        for symbol, phase, ind in snap.phases:
            engine.phases[symbol] = phase
            if phase != PHASE_CONTINUOUS:
                engine._symbols.pop(symbol, None)
            if ind:
                engine.indicative[symbol] = Uncross(*ind)
        engine.last_px = dict(snap.last_prices)
        for items, held in ((snap.orders, False), (snap.stops, True)):
            for item in items:
                # 15 items; 13 for a limit order (no ord_type, stop_px); 12 in a snapshot written
                # before Order.stp existed (prevention off).
                (order_id, session, clordid, symbol, side, price, qty, leaves, cum, cost, tif, reply_to, stp,
                 ord_type, stop_px) = (item if len(item) == 15 else (*item, ORD_LIMIT, 0) if len(item) == 13
                                       else (*item, STP_OFF, ORD_LIMIT, 0))
                book = engine.books.get(symbol)
                if book is None:
                    raise ValueError(f"the snapshot holds orders on {symbol}, which this shard does not "
                                     "trade")
                state = engine.sessions[session]
                if len(item) == 15:
                    where = HELD if held else IN_MARKET if ord_type == ORD_MARKET else IN_BOOK
                    special = SpecialOrder(order_id, session, clordid, symbol, side, price, qty, tif,
                                           reply_to, state, leaves=leaves, cum=cum, cost=cost, stp=stp,
                                           ord_type=ord_type, stop_px=stop_px, where=where)
                    order: Order = special
                    if where == HELD:
                        engine.stops.setdefault(symbol, []).append(special)
                    elif where == IN_MARKET:
                        engine.market.setdefault(symbol, []).append(special)
                    else:
                        book.add(order)
                        engine._specials_rest = True
                else:
                    order = Order(order_id, session, clordid, symbol, side, price, qty, tif, reply_to, state,
                                  leaves=leaves, cum=cum, cost=cost, stp=stp)
                    book.add(order)
                by_key[(session, clordid)] = order
        for item in snap.sessions:
            name, live = item[0], item[5]
            state = engine.sessions[name]
            state.live = {clordid: by_key[(name, clordid)] for clordid in live}
        for book in engine.books.values():
            book.show_all()
        return engine


def _order_item(o: Order) -> tuple[Any, ...]:
    """A waiting order as a MatcherSnapshot ``orders``/``stops`` item (15 items for a special order)."""
    item = (o.order_id, o.session, o.clordid, o.symbol, o.side, o.price, o.qty, o.leaves, o.cum, o.cost,
            o.tif, o.reply_to, o.stp)
    return item if type(o) is Order else (*item, o.ord_type, o.stop_px)


def _fok_text(book: Book, qty: int, price: int) -> str:
    return f"FOK: {qty} cannot all trade at once at {book.instrument.to_price(price)} or better; cancelled"


def _stp_aggressor_text(stp: int, stopper: Order) -> str:
    both = " (and that order cancelled)" if stp == STP_CANCEL_BOTH else ""
    return (f"self-trade prevention: remainder cancelled, it would have traded with {stopper.clordid} "
            f"of the same session{both}")


_STATUS_TEXT = {ST_FILLED: "filled", ST_CANCELED: "cancelled", ST_REPLACED: "replaced",
                ST_REJECTED: "rejected"}
