"""Every message on the bus: frozen, slotted dataclasses, and the one codec (msgpack) for them.

Prices are integer ticks and quantities whole units. Sides and time-in-force use their FIX values
(Side 54: 1 buy, 2 sell; TimeInForce 59: 0 day, 1 GTC, 2 at the opening, 3 IOC, 4 FOK, 7 at the close;
OrdType 40: 1 market, 2 limit, 3 stop, 4 stop limit) so the gateway translates nothing twice.
Timestamps are integer nanoseconds since the epoch, set by whoever creates the message: the matcher
never reads a clock, so replaying a command stream gives the same events.

Wire form: a msgpack array ``[type_code, field1, field2, ...]`` in declaration order. A stream entry
carries a batch: one msgpack array of such arrays under the field ``b`` (fewer, larger entries).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields
from typing import Any, ClassVar, TypeVar

import msgpack

BUY = 1
SELL = 2
DAY = 0
GTC = 1
IOC = 3  # immediate or cancel: trade what is possible now, cancel the rest
FOK = 4  # fill or kill: trade the whole quantity now, or nothing
AT_OPEN = 2  # only in the opening call (PRE_OPEN); what the opening auction leaves is cancelled
AT_CLOSE = 7  # only in the closing call (PRE_CLOSE); what the closing auction leaves is cancelled

# OrdType (40).
ORD_MARKET = 1  # price 0
ORD_LIMIT = 2
ORD_STOP = 3  # held until a trade at or through stop_px, then a market order
ORD_STOP_LIMIT = 4  # held until a trade at or through stop_px, then a limit order at price

# An instrument's trading phase: the matcher's own ints (the gateway maps them to SecurityTradingStatus
# 326 and TradingSessionSubID 625). A call phase collects orders without trading; leaving it for
# CONTINUOUS or CLOSED uncrosses the book at one price (PRE_OPEN -> CONTINUOUS: the opening auction,
# PRE_CLOSE -> CLOSED: the closing auction, HALTED -> CONTINUOUS: the resume auction).
PHASE_CLOSED = 0
PHASE_PRE_OPEN = 1  # opening call
PHASE_CONTINUOUS = 2  # the default for every instrument
PHASE_PRE_CLOSE = 3  # closing call
PHASE_HALTED = 4  # halt call
PHASES = (PHASE_CLOSED, PHASE_PRE_OPEN, PHASE_CONTINUOUS, PHASE_PRE_CLOSE, PHASE_HALTED)
CALL_PHASES = (PHASE_PRE_OPEN, PHASE_PRE_CLOSE, PHASE_HALTED)
PHASE_NAMES = {PHASE_CLOSED: "CLOSED", PHASE_PRE_OPEN: "PRE_OPEN", PHASE_CONTINUOUS: "CONTINUOUS",
               PHASE_PRE_CLOSE: "PRE_CLOSE", PHASE_HALTED: "HALTED"}
ALL_SYMBOLS = "*"  # SetPhase.symbol: every instrument of the shard

# Self-trade prevention (NewOrder.stp): what the matcher does when an order would trade with a
# resting order of the same session. The session's setting, put on each of its orders by the gateway.
STP_OFF = 0
STP_CANCEL_RESTING = 1
STP_CANCEL_AGGRESSOR = 2
STP_CANCEL_BOTH = 3

# OrdRejReason (103) values the matcher uses.
REJ_BROKER_OPTION = 0
REJ_UNKNOWN_SYMBOL = 1
REJ_EXCHANGE_CLOSED = 2
REJ_ORDER_EXCEEDS_LIMIT = 3
REJ_DUPLICATE_ORDER = 6
REJ_INCORRECT_QUANTITY = 13
REJ_OTHER = 99

# CxlRejReason (102) values.
CXL_TOO_LATE = 0
CXL_UNKNOWN_ORDER = 1
CXL_DUPLICATE_CLORDID = 6
CXL_OTHER = 99

# CxlRejResponseTo (434).
RESPONSE_TO_CANCEL = 1
RESPONSE_TO_REPLACE = 2


class SchemaError(ValueError):
    """Bytes on the bus that are not a message of this schema."""


class Message:
    """Base of every bus message; ``CODE`` is its type code on the wire."""

    __slots__ = ()
    CODE: ClassVar[int]
    _FIELDS: ClassVar[tuple[str, ...]]


_REGISTRY: dict[int, type[Message]] = {}
M = TypeVar("M", bound=type[Message])


def _register(code: int) -> Any:
    def wrap(cls: M) -> M:
        if code in _REGISTRY:
            raise RuntimeError(f"type code {code} used twice")
        cls.CODE = code
        cls._FIELDS = tuple(f.name for f in fields(cls))  # type: ignore[arg-type]
        _REGISTRY[code] = cls
        return cls

    return wrap


# --------------------------------------------------------------------------- commands (to matcher)

@_register(1)
@dataclass(frozen=True, slots=True)
class NewOrder(Message):
    session: str  # the client's SenderCompID: one FIX session
    clordid: str
    symbol: str
    side: int
    price: int  # ticks
    qty: int
    tif: int
    reply_to: str  # gateway id whose events stream gets the answers
    seq: int  # MsgSeqNum (34) of the FIX message: (session, clordid, seq) identifies a redelivery
    ts: int
    # Self-trade prevention (STP_*). Last, with a default: an entry written before it existed (an
    # orders stream in an AOF) reads as "off", in both the dataclass and the matcher's wire form.
    stp: int = STP_OFF
    # OrdType (40, ORD_*) and StopPx (99, ticks; 0 unless a stop). Last, with defaults, as stp.
    ord_type: int = ORD_LIMIT
    stop_px: int = 0


@_register(2)
@dataclass(frozen=True, slots=True)
class CancelOrder(Message):
    session: str
    clordid: str
    orig_clordid: str
    symbol: str
    side: int
    reply_to: str
    seq: int
    ts: int


@_register(3)
@dataclass(frozen=True, slots=True)
class ReplaceOrder(Message):
    session: str
    clordid: str
    orig_clordid: str
    symbol: str
    side: int
    price: int
    qty: int
    reply_to: str
    seq: int
    ts: int


@_register(4)
@dataclass(frozen=True, slots=True)
class SessionEnded(Message):
    """The FIX session ended: cancel its resting orders and forget its ClOrdIDs."""

    session: str
    reply_to: str
    ts: int


@_register(6)  # 5 is MatcherSnapshot
@dataclass(frozen=True, slots=True)
class EndOfDay(Message):
    """The trading day ``day`` (YYYYMMDD, UTC) ended at ``ts``: cancel every resting Day order.

    Sent by every gateway to every shard (several may send the same day: the matcher acts once).
    """

    day: int
    ts: int


@_register(7)
@dataclass(frozen=True, slots=True)
class StatusRequest(Message):
    """OrderStatusRequest (35=H): the matcher answers with a StatusReport (ExecType I)."""

    session: str
    clordid: str  # ClOrdID (11) of the order asked about
    order_id: str  # OrderID (37) when the client gave one, else ""
    symbol: str
    side: int
    req_id: str  # OrdStatusReqID (790), echoed, or ""
    reply_to: str
    seq: int
    ts: int


# MassCancelRequestType (530) values the exchange takes; "by side" is type 7 with a Side (54).
MASS_CANCEL_SYMBOL = 1
MASS_CANCEL_ALL = 7


@_register(8)
@dataclass(frozen=True, slots=True)
class MassCancel(Message):
    """OrderMassCancelRequest (35=q): cancel the session's resting orders, all or of one symbol,
    optionally of one side. Answered with a MassCancelReport, then a Cancelled event per order."""

    session: str
    clordid: str  # the request's own ClOrdID (11)
    request_type: int  # MASS_CANCEL_SYMBOL or MASS_CANCEL_ALL
    symbol: str  # "" for MASS_CANCEL_ALL
    side: int  # 0: both sides
    reply_to: str
    seq: int
    ts: int


@_register(9)
@dataclass(frozen=True, slots=True)
class ImageRequest(Message):
    """A gateway asks for a BookImage of every book of the shard, on the market stream, in order
    with the BookUpdates around it (so a market-data mirror starts exactly where the books are)."""

    reply_to: str
    ts: int


@_register(11)
@dataclass(frozen=True, slots=True)
class SetPhase(Message):
    """Put ``symbol`` (ALL_SYMBOLS: every instrument of the shard) into ``phase`` (PHASE_*).

    Idempotent: a SetPhase to the phase the instrument is already in does nothing (several gateways or
    schedulers may send the same one). Leaving a call for CONTINUOUS or CLOSED uncrosses the book.
    """

    symbol: str
    phase: int
    reason: str
    ts: int


Command = (NewOrder | CancelOrder | ReplaceOrder | SessionEnded | EndOfDay | StatusRequest | MassCancel
           | ImageRequest | SetPhase)


@_register(10)
@dataclass(frozen=True, slots=True)
class StpSetting(Message):
    """A session's self-trade prevention changed (the lab page): the gateway's record to its own intake
    publisher, which applies it to the orders after it. Never on the bus."""

    session: str
    stp: int  # STP_*
    ts: int


# --------------------------------------------------------------------------- events (to gateways)
# Every order event carries the order's whole state so the gateway can write a complete
# ExecutionReport without remembering anything: cum_cost is sum(fill price ticks * fill qty),
# so AvgPx = cum_cost / cum_qty ticks, exactly.

@_register(20)
@dataclass(frozen=True, slots=True)
class Accepted(Message):
    session: str
    clordid: str
    order_id: str
    symbol: str
    side: int
    price: int
    qty: int
    tif: int
    exec_id: str
    ts: int
    ord_type: int = ORD_LIMIT  # OrdType (40), last with a default: the gateway echoes 40/99
    stop_px: int = 0


@_register(21)
@dataclass(frozen=True, slots=True)
class Rejected(Message):
    session: str
    clordid: str
    symbol: str
    side: int
    price: int
    qty: int
    reason: int  # OrdRejReason (103)
    text: str
    exec_id: str
    ts: int
    ord_type: int = ORD_LIMIT  # OrdType (40), last with a default: the gateway echoes 40/99
    stop_px: int = 0


@_register(22)
@dataclass(frozen=True, slots=True)
class Filled(Message):
    session: str
    clordid: str
    order_id: str
    symbol: str
    side: int
    price: int
    qty: int
    last_px: int
    last_qty: int
    cum_qty: int
    leaves_qty: int
    cum_cost: int
    match_id: str
    exec_id: str
    ts: int
    ord_type: int = ORD_LIMIT  # OrdType (40), last with a default: the gateway echoes 40/99
    stop_px: int = 0


@_register(23)
@dataclass(frozen=True, slots=True)
class Cancelled(Message):
    session: str
    clordid: str  # the cancel's ClOrdID (or the order's own when the exchange cancels it)
    orig_clordid: str
    order_id: str
    symbol: str
    side: int
    price: int
    qty: int
    cum_qty: int
    cum_cost: int
    text: str
    exec_id: str
    ts: int
    ord_type: int = ORD_LIMIT  # OrdType (40), last with a default: the gateway echoes 40/99
    stop_px: int = 0


@_register(24)
@dataclass(frozen=True, slots=True)
class Replaced(Message):
    session: str
    clordid: str
    orig_clordid: str
    order_id: str
    symbol: str
    side: int
    price: int
    qty: int
    cum_qty: int
    leaves_qty: int
    cum_cost: int
    exec_id: str
    ts: int
    ord_type: int = ORD_LIMIT  # OrdType (40), last with a default: the gateway echoes 40/99
    stop_px: int = 0


@_register(25)
@dataclass(frozen=True, slots=True)
class CancelRejected(Message):
    session: str
    clordid: str
    orig_clordid: str
    order_id: str  # "NONE" when the order is unknown
    response_to: int  # CxlRejResponseTo (434)
    reason: int  # CxlRejReason (102)
    status: int  # OrdStatus (39) of the original order as the matcher knows it (8 when unknown)
    text: str
    ts: int


@_register(27)
@dataclass(frozen=True, slots=True)
class StatusReport(Message):
    """The answer to a StatusRequest: an ExecutionReport with ExecType I (order status).

    ``status`` is the OrdStatus (39); 8 (rejected) with ``text`` when the order is unknown (FIX 4.4).
    """

    session: str
    clordid: str
    order_id: str  # "NONE" when unknown
    symbol: str
    side: int
    price: int
    qty: int
    cum_qty: int
    leaves_qty: int
    cum_cost: int
    status: int
    text: str
    req_id: str
    exec_id: str
    ts: int
    ord_type: int = ORD_LIMIT  # OrdType (40), last with a default: the gateway echoes 40/99
    stop_px: int = 0


@_register(28)
@dataclass(frozen=True, slots=True)
class MassCancelReport(Message):
    """OrderMassCancelReport (35=r): sent before the Cancelled events of the orders it cancelled."""

    session: str
    clordid: str
    order_id: str  # the exchange's id for the request (37)
    request_type: int  # 530
    response: int  # MassCancelResponse (531): 0 rejected, else the request type
    reject_reason: int  # MassCancelRejectReason (532), used when response is 0
    affected: int  # TotalAffectedOrders (533)
    symbol: str
    side: int
    text: str
    ts: int


@_register(29)
@dataclass(frozen=True, slots=True)
class Triggered(Message):
    """A held stop (stop-limit) order was triggered by a trade at or through ``stop_px`` and entered the
    book as a market (limit) order: ExecType L. ``ord_type`` is the order's own (ORD_STOP or
    ORD_STOP_LIMIT); the usual fills/cancel follow."""

    session: str
    clordid: str
    order_id: str
    symbol: str
    side: int
    price: int
    qty: int
    ord_type: int
    stop_px: int
    exec_id: str
    ts: int


OrderEvent = (Accepted | Rejected | Filled | Cancelled | Replaced | CancelRejected | StatusReport
              | MassCancelReport | Triggered)


# --------------------------------------------------------------------------- market data (to web)

@_register(26)
@dataclass(frozen=True, slots=True)
class Refused(Message):
    """An order message the gateway's intake refused (it never reached a matcher), with its answer:
    ``body`` is the whole FIX message (a rejected ExecutionReport or an OrderCancelReject, from tag
    35 on), built where the refusal was decided, sent on ``session`` by the gateway's events thread."""

    session: str
    body: str
    ts: int


@_register(40)
@dataclass(frozen=True, slots=True)
class Trade(Message):
    symbol: str
    price: int
    qty: int
    match_id: str
    aggressor_side: int
    ts: int


@_register(41)
@dataclass(frozen=True, slots=True)
class Depth(Message):
    """Aggregated book after a change: ((price, qty, orders), ...) best first on each side."""

    symbol: str
    bids: tuple[tuple[int, int, int], ...]
    asks: tuple[tuple[int, int, int], ...]
    ts: int


@_register(42)
@dataclass(frozen=True, slots=True)
class BookUpdate(Message):
    """The price levels of one book that changed in one matcher batch, at their new state:
    ((side, price, qty, orders), ...); qty 0 means the level is gone. After the batch's Trades."""

    symbol: str
    changes: tuple[tuple[int, int, int, int], ...]
    ts: int


@_register(43)
@dataclass(frozen=True, slots=True)
class BookImage(Message):
    """A whole book, every level ((price, qty, orders), ...) best first, answering an ImageRequest."""

    symbol: str
    bids: tuple[tuple[int, int, int], ...]
    asks: tuple[tuple[int, int, int], ...]
    ts: int


@_register(44)
@dataclass(frozen=True, slots=True)
class PhaseChanged(Message):
    """An instrument's phase changed (PHASE_*), on the market stream. Emitted after the uncross
    (its Trades and BookUpdate) when the change ends a call."""

    symbol: str
    phase: int
    prev_phase: int
    reason: str
    ts: int


@_register(45)
@dataclass(frozen=True, slots=True)
class Indicative(Message):
    """During a call: the price the book would uncross at now, the volume it would execute and the
    surplus left (``imbalance_side`` 0 none, BUY or SELL). ``price`` 0 means no cross. Published
    whenever it changes; a last one with volume 0 after the uncross."""

    symbol: str
    price: int
    volume: int
    imbalance_qty: int
    imbalance_side: int
    ts: int


# --------------------------------------------------------------------------- lab sessions (web <-> gateway)

LAB_OPS = ("order", "cancel", "replace", "drop_next", "silent", "talk", "logout", "status", "mass_cancel",
           "md_subscribe", "md_unsubscribe", "stp")


@_register(60)
@dataclass(frozen=True, slots=True)
class LabStart(Message):
    """Start a FIX initiator session for a visitor; answers arrive on the lab's own stream.

    ``fix_version``: the session's version, a name of ``shared.fix.versions.VERSIONS`` ("4.4", "4.2",
    "5.0SP2"); last, so a start encoded before it decodes as FIX 4.4."""

    lab_id: str
    client_addr: str
    ts: int
    fix_version: str = "4.4"


@_register(61)
@dataclass(frozen=True, slots=True)
class LabCommand(Message):
    """A visitor's command for their session: ``op`` is one of LAB_OPS.

    ``price`` is the decimal string the visitor typed (it goes into tag 44 as it is). ``tif`` is
    the order's TimeInForce (59); ``value`` an op's own argument (the self-trade prevention mode for
    "stp", the MarketDepth for "md_subscribe").
    """

    lab_id: str
    op: str
    symbol: str = ""
    side: int = 0
    price: str = ""
    qty: int = 0
    orig_clordid: str = ""
    ts: int = 0
    tif: int = 0
    value: str = ""


@_register(62)
@dataclass(frozen=True, slots=True)
class WireRecord(Message):
    """One whole FIX message the tap saw. ``source`` is "client" or "exchange"."""

    lab_id: str
    n: int  # the tap's own record number, from 1
    source: str
    raw: bytes
    withheld: bool
    ts: int


@_register(63)
@dataclass(frozen=True, slots=True)
class LabOrder(Message):
    clordid: str
    symbol: str
    side: int
    price: str
    qty: int
    cum_qty: int
    leaves_qty: int
    status: str  # OrdStatus (39) value


@_register(64)
@dataclass(frozen=True, slots=True)
class LabState(Message):
    """A lab session's state: published on every change."""

    lab_id: str
    gateway_id: str
    comp_id: str
    status: str  # "connecting", "logged_on", "logged_out", "ended"
    next_sender_seq: int  # the client's engine: next MsgSeqNum it sends
    next_target_seq: int  # the client's engine: next MsgSeqNum it expects
    exchange_next_sender_seq: int
    exchange_next_target_seq: int
    heartbeat_s: int
    expires_at: int  # ns since epoch
    silent: bool
    drop_armed: bool
    orders: tuple[LabOrder, ...]
    text: str
    ts: int


@_register(65)
@dataclass(frozen=True, slots=True)
class LabNotice(Message):
    """Something the visitor should read: an error in a command, a limit reached."""

    lab_id: str
    level: str  # "info" or "error"
    text: str
    ts: int


# --------------------------------------------------------------------------- operator (fixlab admin)

@_register(70)
@dataclass(frozen=True, slots=True)
class AdminCommand(Message):
    """An operator's command (``fixlab admin``) for the services that act on ``op``.

    ``mac`` is the HMAC of the other fields under the operator's token (shared/operator.py): the
    receiving service checks it, so whoever can write to the bus without the token cannot command.
    Answers (AdminAnswer) go to ``streams.admin_answers_stream(req_id)``.
    """

    req_id: str
    op: str  # "kill", "unkill", ... (the services' own lists)
    target: str  # a CompID, a symbol, ...: the op's subject
    args: str  # the op's own arguments, "" if none
    ts: int  # wall-clock ns when signed: old commands are refused
    mac: str  # hex HMAC-SHA256


@_register(71)
@dataclass(frozen=True, slots=True)
class AdminAnswer(Message):
    """One service instance's answer to an AdminCommand: ``ok`` false for a refusal, ``text`` says why."""

    req_id: str
    source: str  # "gateway gw1", "matcher 0", ...
    ok: bool
    text: str
    ts: int
    more: bool = False  # another answer from this source follows (what the command went on to do)


@_register(72)
@dataclass(frozen=True, slots=True)
class CopiedReport(Message):
    """An ExecutionReport told to ``session`` (its FIX 4.4 body, from tag 35 on), kept for its firm's
    drop copy session (services/gateway/dropcopy.py)."""

    session: str
    body: str
    ts: int


# --------------------------------------------------------------------------- codec

def _to_wire(msg: Message) -> list[Any]:
    if type(msg) is NewOrder:  # a limit order's trailing defaults left out, as as_wire does
        return list(as_wire(msg))
    out: list[Any] = [msg.CODE]
    for name in msg._FIELDS:
        value = getattr(msg, name)
        if isinstance(value, tuple) and value and isinstance(value[0], Message):
            value = [_to_wire(v) for v in value]
        out.append(value)
    return out


def _from_wire(item: Any) -> Message:
    if not isinstance(item, (list, tuple)) or not item or not isinstance(item[0], int):
        raise SchemaError(f"not a bus message: {item!r:.80}")
    cls = _REGISTRY.get(item[0])
    if cls is None:
        raise SchemaError(f"unknown message type code {item[0]}")
    values = list(item[1:])
    if cls is LabState:
        values[12] = tuple(_from_wire(o) for o in values[12])
    try:
        return cls(*values)
    except TypeError as exc:
        raise SchemaError(f"{cls.__name__}: {exc}") from None


def encode(msg: Message) -> bytes:
    return msgpack.packb(_to_wire(msg), use_bin_type=True)


def decode(data: bytes) -> Message:
    try:
        item = msgpack.unpackb(data, raw=False, use_list=False)
    except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as exc:
        raise SchemaError(f"undecodable bus payload: {exc}") from None
    return _from_wire(item)


def encode_batch(msgs: Iterable[Message]) -> bytes:
    return msgpack.packb([_to_wire(m) for m in msgs], use_bin_type=True)


def decode_batch(data: bytes) -> list[Message]:
    try:
        items = msgpack.unpackb(data, raw=False, use_list=False)
    except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as exc:
        raise SchemaError(f"undecodable bus payload: {exc}") from None
    if not isinstance(items, tuple):
        raise SchemaError("a batch must be an array of messages")
    return [_from_wire(i) for i in items]


def to_dict(msg: Message) -> dict[str, Any]:
    """A JSON-ready view of a message (bytes become text with escapes) for tools and the web."""
    out: dict[str, Any] = {"type": type(msg).__name__}
    for name in msg._FIELDS:
        value = getattr(msg, name)
        if isinstance(value, bytes):
            value = value.decode("latin-1")
        elif isinstance(value, tuple) and value and isinstance(value[0], Message):
            value = [to_dict(v) for v in value]
        out[name] = value
    return out


def message_types() -> Sequence[type[Message]]:
    return tuple(_REGISTRY.values())


# --------------------------------------------------------------------------- bench (instances -> merge)

@_register(110)
@dataclass(frozen=True, slots=True)
class BenchResult(Message):
    """One bench instance's measured phase, raw, so several instances merge exactly.

    ``latencies_ns`` holds every acknowledged order's round trip (perf_counter_ns, one clock per
    instance); ``start_ns``/``end_ns`` are wall-clock ns so instances on one machine share a clock.
    """

    run_id: str
    instance: int
    sessions: int
    window: int
    orders: int  # requested in the measured phase
    sent: int
    acknowledged: int
    rejected: int
    lost: int
    start_ns: int
    end_ns: int
    latencies_ns: tuple[int, ...]


# --------------------------------------------------------------------------- matcher state (codes 5-19)

@_register(5)
@dataclass(frozen=True, slots=True)
class MatcherSnapshot(Message):
    """A matcher shard's whole state, including every orders-stream entry up to ``last_id``.

    ``orders``: resting orders, each book's bids then asks, best price first, oldest first, as
    (order_id, session, clordid, symbol, side, price, qty, leaves, cum_qty, cum_cost, tif, reply_to, stp)
    (``stp`` last: a snapshot written before it existed holds 12 items, read as "off").
    ``sessions``: (session, seen ClOrdIDs, their MsgSeqNums, closed ClOrdIDs, their OrdStatus,
    open ClOrdIDs in the order they were opened, the done orders kept for StatusRequest (oldest first),
    ClOrdIDs replaced away, the ClOrdIDs that replaced them, recent StatusRequests as (ClOrdID,
    MsgSeqNum)), each a flat tuple (see services/matcher/engine.py; a snapshot written before the last
    four existed holds 6 items per session and still loads).
    ``end_of_day``: the last day an EndOfDay was applied for (0: none; last, so that snapshots
    written before it existed still load).
    """

    shard: str
    last_id: str
    next_order: int
    next_exec: int
    next_match: int
    orders: tuple[tuple[Any, ...], ...]
    sessions: tuple[tuple[Any, ...], ...]
    ts: int
    end_of_day: int = 0
    # Issue 31, last with defaults so older snapshots load (every instrument CONTINUOUS, no stops):
    # ``phases``: (symbol, phase, last Indicative as (price, volume, imbalance_qty, imbalance_side)) for
    # every instrument not in PHASE_CONTINUOUS or with a published Indicative; ``stops``: held stop orders
    # in arrival order, each as an ``orders`` item; ``last_prices``: (symbol, last trade price ticks).
    # An ``orders`` item may carry two more items, ord_type and stop_px (absent: ORD_LIMIT, 0).
    phases: tuple[tuple[Any, ...], ...] = ()
    stops: tuple[tuple[Any, ...], ...] = ()
    last_prices: tuple[tuple[Any, ...], ...] = ()


def as_wire(msg: Message | tuple[Any, ...]) -> tuple[Any, ...]:
    """A flat message (a command, an order event) in wire form ``(CODE, field1, ...)``: the items
    ``encode_batch`` writes for it, without its generic walk. A tuple is taken as it is. A limit
    NewOrder leaves out its trailing defaults (ord_type, stop_px): it decodes to the same message."""
    if type(msg) is tuple:
        return msg
    if type(msg) is NewOrder:  # the hot path: one per order
        if msg.ord_type == ORD_LIMIT and not msg.stop_px:  # the trailing defaults left out
            return (1, msg.session, msg.clordid, msg.symbol, msg.side, msg.price, msg.qty, msg.tif,
                    msg.reply_to, msg.seq, msg.ts, msg.stp)
        return (1, msg.session, msg.clordid, msg.symbol, msg.side, msg.price, msg.qty, msg.tif,
                msg.reply_to, msg.seq, msg.ts, msg.stp, msg.ord_type, msg.stop_px)
    return (msg.CODE, *(getattr(msg, name) for name in msg._FIELDS))  # type: ignore[union-attr]


def from_wire(item: Sequence[Any]) -> Message:
    """Build a message from its wire form ``(code, field1, ...)`` (what the matcher core emits)."""
    return _from_wire(item)


def encode_wire_batch(items: Iterable[Sequence[Any]]) -> bytes:
    """Encode messages already in wire form: the same bytes ``encode_batch`` gives for them."""
    return msgpack.packb(list(items), use_bin_type=True)


def decode_wire_batch(data: bytes) -> list[tuple[Any, ...]]:
    """Decode a batch into wire-form tuples ``(code, field1, ...)`` without building messages.

    For a consumer whose hot path reads fields by position (the matcher): building a frozen
    dataclass costs several times more than the msgpack decoding itself. Codes are not checked
    against the registry; fields are not checked at all.
    """
    try:
        items = msgpack.unpackb(data, raw=False, use_list=False)
    except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as exc:
        raise SchemaError(f"undecodable bus payload: {exc}") from None
    if not isinstance(items, tuple):
        raise SchemaError("a batch must be an array of messages")
    for item in items:
        if not isinstance(item, tuple) or not item or not isinstance(item[0], int):
            raise SchemaError(f"not a bus message: {item!r:.80}")
    return list(items)
