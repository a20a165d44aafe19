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

from services.matcher.book import Book, Fill, Order
from shared.config import Instrument
from shared.schema import (
    BUY,
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
    REJ_DUPLICATE_ORDER,
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
    MassCancel,
    MassCancelReport,
    MatcherSnapshot,
    Message,
    NewOrder,
    Rejected,
    Replaced,
    ReplaceOrder,
    SessionEnded,
    StatusReport,
    StatusRequest,
    Trade,
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

# MassCancelRejectReason (532), FIX 4.4. An unsupported request type is 99 with a text, as the
# gateway answers it when it refuses one itself (0, "mass cancel not supported", would say none is).
MASS_REJ_UNKNOWN_SECURITY = 1
MASS_REJ_OTHER = 99
# A session's StatusRequests remembered to tell a producer's retry from a new request: a retry
# writes the same records again right after, never this many status requests of one session later.
STATUS_MEMORY = 64

_SIDES = frozenset((BUY, SELL))
_TIFS = frozenset((DAY, GTC, IOC, FOK))
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
_COMMANDS: dict[int, type[Message]] = {c.CODE: c for c in (NewOrder, CancelOrder, ReplaceOrder, SessionEnded,
                                                           EndOfDay, StatusRequest, MassCancel, ImageRequest)}
_NAMES = {c.CODE: c.__name__ for c in message_types()}
_STRINGS = frozenset(("session", "clordid", "orig_clordid", "symbol", "reply_to"))
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
        if name in maybe_empty:
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
                 id_prefix: str = "", book_updates: bool = False) -> None:
        self.limits = limits or Limits()
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
                else:
                    name = _NAMES.get(code, f"type code {code!r:.20}")
                    raise MalformedCommand(f"{name} is not a matcher command")
            except MalformedCommand as exc:
                result.malformed.append((cmd, str(exc)))
                continue
            applied += 1
            if redelivered:
                redeliveries += 1
        self.commands += applied
        result.redelivered = redeliveries
        if self._dirty:
            n = self.limits.depth_levels
            books, book_updates = self.books, self.book_updates
            for symbol, ts in self._dirty.items():
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
        if self._image_ts is not None:
            ts = self._image_ts
            for symbol, book in self.books.items():
                bids, asks = book.image()
                out.append((None, (_BOOK_IMAGE, symbol, bids, asks, ts)))
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
        if n == 14:
            _, session, clordid, symbol, side, price, qty, tif, reply_to, seq, ts, stp, ord_type, stop_px = w
            if ord_type != 2 or stop_px:  # 2: ORD_LIMIT; market and stop orders: off the hot path
                return self._new_special(w)
        elif n == 12:
            _, session, clordid, symbol, side, price, qty, tif, reply_to, seq, ts, stp = w
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
            self._reject(w, REJ_UNKNOWN_SYMBOL, f"unknown symbol {symbol}")
            state.closed[clordid] = ST_REJECTED
            state.keep((clordid, "NONE", symbol, side, price, qty, 0, 0, ST_REJECTED))
            return False
        book, lo, hi = where
        live = state.live
        # IOC and FOK never rest, so the open-orders limit does not apply to them.
        if not (lo <= price <= hi and self._min_qty <= qty <= self._max_qty and side in (1, 2)
                and ((tif in (0, 1) and len(live) < self._max_open) or tif in (3, 4))):
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
        if tif > 1 or stp:  # IOC, FOK or self-trade prevention: off the hot path
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
        """A market, stop or stop-limit order (NewOrder.ord_type other than limit)."""
        self._reject(w, REJ_OTHER, f"order type {w[12]} is not accepted: only limit (2)")
        return False

    def _why_not(self, book: Book, state: SessionState, side: int, price: int, qty: int,
                 tif: int) -> tuple[int, str]:
        limits = self.limits
        inst = book.instrument
        lo, hi = self._bands[book.symbol]
        if side not in _SIDES:
            return REJ_OTHER, f"side {side} is neither 1 (buy) nor 2 (sell)"
        if tif not in _TIFS:
            return (REJ_OTHER, f"time in force {tif} is not accepted: only day (0), GTC (1), IOC (3) "
                               "or FOK (4)")
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
        self._out.append((order.reply_to, (_CANCELLED, order.session, order.clordid, order.clordid,
                                           order.order_id, order.symbol, order.side, order.price, order.qty,
                                           order.cum, order.cost, text, self._exec_id(), ts)))

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
        return cum, cost

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
        if order.symbol != symbol or order.side != side:
            problem = f"symbol/side {symbol}/{side} differ from the order's {order.symbol}/{order.side}"
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
            stopper = self._fill(order, ts) if book.crosses(order.side, price) else None
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
            self.books[order.symbol].remove(order)
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
        day_orders = [o for book in self.books.values() for o in book.orders() if o.tif == DAY]
        for order in day_orders:
            self._withdraw(order, "end of day", ts)
        return False

    def _withdraw(self, order: Order, text: str, ts: int) -> None:
        """The exchange cancels a resting order of a live session (end of day, mass cancel)."""
        self.books[order.symbol].remove(order)
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
        self._out.append((reply_to, (_STATUS_REPORT, session, c, oid, o_symbol, o_side, price, qty, cum,
                                     leaves, cost, status, text, req_id, self._exec_id(), ts)))
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
            (o.order_id, o.session, o.clordid, o.symbol, o.side, o.price, o.qty, o.leaves, o.cum, o.cost,
             o.tif, o.reply_to, o.stp)
            for book in self.books.values() for o in book.orders()
        )
        sessions = tuple(
            (s.name, tuple(s.seen), tuple(s.seen.values()), tuple(s.closed), tuple(s.closed.values()),
             tuple(s.live), s.done_records(), tuple(s.renamed), tuple(s.renamed.values()), tuple(s.queries))
            for s in self.sessions.values()
        )
        return MatcherSnapshot(shard, last_id, self.next_order, self.next_exec, self.next_match, orders,
                               sessions, ts, self.end_of_day)

    @classmethod
    def restore(cls, snap: MatcherSnapshot, instruments: Iterable[Instrument], *,
                limits: Limits | None = None, id_prefix: str = "", book_updates: bool = False) -> Engine:
        """An engine in exactly the state ``snap`` recorded (it must be this shard's).

        Market data carries on from the restored books: the next BookUpdate is relative to them.
        """
        engine = cls(instruments, limits=limits, id_prefix=id_prefix, book_updates=book_updates)
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
        for item in snap.orders:
            # 13 items; 12 in a snapshot written before Order.stp existed (prevention off).
            (order_id, session, clordid, symbol, side, price, qty, leaves, cum, cost, tif, reply_to,
             stp) = item if len(item) == 13 else (*item, STP_OFF)
            book = engine.books.get(symbol)
            if book is None:
                raise ValueError(f"the snapshot holds orders on {symbol}, which this shard does not trade")
            state = engine.sessions[session]
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


def _fok_text(book: Book, qty: int, price: int) -> str:
    return f"FOK: {qty} cannot all trade at once at {book.instrument.to_price(price)} or better; cancelled"


def _stp_aggressor_text(stp: int, stopper: Order) -> str:
    both = " (and that order cancelled)" if stp == STP_CANCEL_BOTH else ""
    return (f"self-trade prevention: remainder cancelled, it would have traded with {stopper.clordid} "
            f"of the same session{both}")


_STATUS_TEXT = {ST_FILLED: "filled", ST_CANCELED: "cancelled", ST_REPLACED: "replaced",
                ST_REJECTED: "rejected"}
