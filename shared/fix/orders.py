"""A session's orders and the FIX messages its user's commands become: pure, no I/O.

Shared by the gateway's lab sessions (a visitor's LabCommand) and the terminal client (services/client,
the same commands typed at a prompt).

A visitor's command is turned into the (tag, value) fields of one FIX message; the session adapter
hands them to its QuickFIX engine, which adds the header and trailer. Values are sent as the
visitor typed them (a price of ``abc`` reaches the exchange, which answers with its own Reject),
but nothing that would break the wire's framing (control characters) gets through.

A session of FIX 4.2 (``fix_version``) sends HandlInst (21) in a NewOrderSingle and a replace, which
4.2 requires, and no OrdStatusReqID (790, 4.4's); it follows 4.2's ExecutionReports: a fill is
ExecType 1 or 2 (``is_fill``), a status answer carries ExecTransType 3 (20) and ExecType its state.
Choosing the version when the session is set up keeps FIX 4.4's path as it was.
"""

from __future__ import annotations

import contextlib
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from shared.fix.message import Fields
from shared.fix.versions import DEFAULT as FIX44_VERSION
from shared.fix.versions import FixVersion
from shared.schema import (
    AT_CLOSE,
    AT_OPEN,
    BUY,
    DAY,
    FOK,
    GTC,
    IOC,
    MASS_CANCEL_ALL,
    MASS_CANCEL_SYMBOL,
    SELL,
    STP_CANCEL_AGGRESSOR,
    STP_CANCEL_BOTH,
    STP_CANCEL_RESTING,
    STP_OFF,
    LabCommand,
    LabOrder,
)

MAX_TEXT = 32
MAX_QTY = 10**9
KEEP_ORDERS = 500  # orders remembered per session (open ones and the latest closed ones)
# PendingNew, New, PartiallyFilled, Replaced, PendingCancel, PendingReplace
OPEN_STATUSES = frozenset({"A", "0", "1", "5", "6", "E"})
PENDING_NEW = "A"
# OrdStatus (39) as the page and the terminal client name it: the stock FIX44.xml's words, and 5
# (Replaced, from FIX 4.2), which that file does not list.
ORD_STATUS = {"0": "New", "1": "Partially filled", "2": "Filled", "4": "Canceled", "5": "Replaced",
              "6": "Pending cancel", "8": "Rejected", "A": "Pending new", "E": "Pending replace"}

TIFS = (DAY, GTC, AT_OPEN, IOC, FOK, AT_CLOSE)
STP_NAMES = {STP_OFF: "off", STP_CANCEL_RESTING: "cancel resting", STP_CANCEL_AGGRESSOR: "cancel aggressor",
             STP_CANCEL_BOTH: "cancel both"}
MAX_DEPTH = 100
# MDEntryType (269) a lab subscription asks for: bids, offers, trades.
MD_ENTRY_TYPES = ("0", "1", "2")
HANDL_INST_AUTO = "1"  # HandlInst (21) a FIX 4.2 order carries: the exchange ignores it


def is_fill(f: dict[int, str]) -> bool:
    """Whether an ExecutionReport, given its fields by tag, tells a fill: ExecType F (FIX 4.4, 5.0), or
    1 / 2 with ExecTransType New (FIX 4.2: its status answers carry ExecTransType 3, ExecType the state)."""
    exec_type = f.get(150)
    return exec_type == "F" or (exec_type in ("1", "2") and f.get(20) == "0")


def is_unknown_status(f: dict[int, str]) -> bool:
    """Whether an ExecutionReport answers a status request about an order the exchange does not know
    (ExecType I, or ExecTransType 3 in FIX 4.2, with OrdStatus Rejected)."""
    return f.get(39) == "8" and (f.get(150) == "I" or f.get(20) == "3")



class CommandError(ValueError):
    """A visitor's command that cannot become a FIX message (the text says why)."""


@dataclass(slots=True)
class _Order:
    clordid: str
    symbol: str
    side: int
    price: str
    qty: int
    cum_qty: int = 0
    leaves_qty: int = 0
    status: str = PENDING_NEW
    tif: int = DAY
    order_id: str = ""  # OrderID (37) once the exchange gave one

    def view(self) -> LabOrder:
        return LabOrder(self.clordid, self.symbol, self.side, self.price, self.qty, self.cum_qty,
                        self.leaves_qty, self.status)


def transact_time(ts_ns: int) -> str:
    """UTCTimestamp (tag 60) with milliseconds."""
    dt = datetime.fromtimestamp(ts_ns / 1e9, tz=UTC)
    return dt.strftime("%Y%m%d-%H:%M:%S.") + f"{dt.microsecond // 1000:03d}"


def _text(name: str, value: str) -> str:
    if not value:
        raise CommandError(f"{name} is empty")
    if len(value) > MAX_TEXT:
        raise CommandError(f"{name} is longer than {MAX_TEXT} characters")
    if not value.isascii() or not value.isprintable():
        raise CommandError(f"{name} {value!r} has characters a FIX field cannot carry")
    return value


def _side(side: int) -> int:
    if side not in (BUY, SELL):
        raise CommandError(f"side {side!r} is neither 1 (buy) nor 2 (sell)")
    return side


def _qty(qty: int) -> int:
    if not isinstance(qty, int) or isinstance(qty, bool) or abs(qty) > MAX_QTY:
        raise CommandError(f"quantity {qty!r} is not a whole number up to {MAX_QTY}")
    return qty


def _tif(tif: int) -> int:
    if tif not in TIFS:
        raise CommandError(f"TimeInForce {tif!r} is none of 0 (Day), 1 (GTC), 2 (At the Opening), 3 (IOC), "
                           "4 (FOK), 7 (At the Close)")
    return tif


def stp_mode(value: str) -> int:
    """The self-trade prevention mode of an ``stp`` command's value ("0" to "3")."""
    if not value.isdigit() or int(value) not in STP_NAMES:
        raise CommandError(f"self-trade prevention mode {value!r} is none of "
                           + ", ".join(f"{k} ({v})" for k, v in STP_NAMES.items()))
    return int(value)


class LabOrders:
    """The orders of one session, followed from the commands sent and the ExecutionReports received,
    and its market-data subscriptions (one MDReqID per symbol)."""

    def __init__(self, clordid_prefix: str, fix_version: FixVersion = FIX44_VERSION) -> None:
        self.prefix = clordid_prefix
        self.fix_version = fix_version
        # FIX 4.2 (ExecTransType on its reports): HandlInst on orders, no OrdStatusReqID.
        self._fix42 = fix_version.exec_trans_type
        self._n = 0
        self._orders: OrderedDict[str, _Order] = OrderedDict()
        self.subscriptions: dict[str, str] = {}  # symbol -> MDReqID of its live subscription

    def _next_clordid(self) -> str:
        self._n += 1
        return f"{self.prefix}{self._n}"

    def _remember(self, order: _Order) -> None:
        self._orders[order.clordid] = order
        while len(self._orders) > KEEP_ORDERS:
            self._orders.popitem(last=False)

    def known(self, clordid: str) -> bool:
        return clordid in self._orders

    def open_orders(self) -> tuple[LabOrder, ...]:
        return tuple(o.view() for o in self._orders.values() if o.status in OPEN_STATUSES)

    # ------------------------------------------------------------------ commands -> FIX fields

    def new_order(self, cmd: LabCommand, ts_ns: int) -> tuple[str, Fields]:
        """MsgType and fields of a NewOrderSingle for ``order``, the command's TimeInForce: a limit order,
        or as ``cmd.value`` says: "mkt" (40=1, no price), "stop:STOPPX" (40=3, 99), "stoplimit:STOPPX"
        (40=4, 99 and the price)."""
        symbol = _text("symbol", cmd.symbol)
        side = _side(cmd.side)
        kind, _, stop = cmd.value.partition(":")
        terms: list[tuple[int, str]]
        if kind in ("", "limit"):
            price = _text("price", cmd.price)
            terms = [(40, "2"), (44, price)]
        elif kind == "mkt":
            price, terms = "", [(40, "1")]
        elif kind == "stop":
            price, terms = "", [(40, "3"), (99, _text("stop price", stop))]
        elif kind == "stoplimit":
            price = _text("price", cmd.price)
            terms = [(40, "4"), (44, price), (99, _text("stop price", stop))]
        else:
            raise CommandError(f"order type {kind!r} is none of limit, mkt, stop, stoplimit")
        qty = _qty(cmd.qty)
        tif = _tif(cmd.tif)
        clordid = self._next_clordid()
        self._remember(_Order(clordid, symbol, side, price, qty, 0, qty, tif=tif))
        if self._fix42:
            return "D", [(11, clordid), (21, HANDL_INST_AUTO), (55, symbol), (54, str(side)),
                         (60, transact_time(ts_ns)), (38, str(qty)), *terms, (59, str(tif))]
        return "D", [(11, clordid), (55, symbol), (54, str(side)), (60, transact_time(ts_ns)),
                     (38, str(qty)), *terms, (59, str(tif))]

    def _target(self, cmd: LabCommand) -> _Order:
        if not cmd.orig_clordid:
            raise CommandError(f"{cmd.op} needs the ClOrdID of one of your orders")
        order = self._orders.get(cmd.orig_clordid)
        if order is None:
            raise CommandError(f"unknown order {cmd.orig_clordid!r}: this session never sent it")
        return order

    def cancel(self, cmd: LabCommand, ts_ns: int) -> tuple[str, Fields]:
        """MsgType and fields of an OrderCancelRequest for a ``cancel`` command."""
        order = self._target(cmd)
        clordid = self._next_clordid()
        return "F", [(41, order.clordid), (11, clordid), (55, order.symbol), (54, str(order.side)),
                     (60, transact_time(ts_ns)), (38, str(order.qty))]

    def replace(self, cmd: LabCommand, ts_ns: int) -> tuple[str, Fields]:
        """MsgType and fields of an OrderCancelReplaceRequest (new price and/or quantity)."""
        order = self._target(cmd)
        price = _text("price", cmd.price) if cmd.price else order.price
        qty = _qty(cmd.qty) if cmd.qty else order.qty
        clordid = self._next_clordid()
        if self._fix42:
            return "G", [(41, order.clordid), (11, clordid), (21, HANDL_INST_AUTO), (55, order.symbol),
                         (54, str(order.side)), (60, transact_time(ts_ns)), (38, str(qty)), (40, "2"),
                         (44, price), (59, str(order.tif))]
        return "G", [(41, order.clordid), (11, clordid), (55, order.symbol), (54, str(order.side)),
                     (60, transact_time(ts_ns)), (38, str(qty)), (40, "2"), (44, price), (59, str(order.tif))]

    def status(self, cmd: LabCommand) -> tuple[str, Fields]:
        """MsgType and fields of an OrderStatusRequest (35=H) about one of the session's orders."""
        order = self._target(cmd)
        self._n += 1
        body: Fields = [(11, order.clordid)]
        if order.order_id:
            body.append((37, order.order_id))
        body += [(55, order.symbol), (54, str(order.side))]
        if not self._fix42:  # OrdStatusReqID came with FIX 4.3
            body.append((790, f"{self.prefix}st{self._n}"))
        return "H", body

    def mass_cancel(self, cmd: LabCommand, ts_ns: int) -> tuple[str, Fields]:
        """MsgType and fields of an OrderMassCancelRequest (35=q): every order, or one symbol's."""
        clordid = self._next_clordid()
        if cmd.symbol:
            return "q", [(11, clordid), (530, str(MASS_CANCEL_SYMBOL)), (55, _text("symbol", cmd.symbol)),
                         (60, transact_time(ts_ns))]
        return "q", [(11, clordid), (530, str(MASS_CANCEL_ALL)), (60, transact_time(ts_ns))]

    def md_subscribe(self, cmd: LabCommand, more_types: Sequence[str] = ()) -> tuple[str, Fields]:
        """MsgType and fields of a MarketDataRequest (35=V) subscribing to one symbol's book and trades:
        snapshot + updates (263=1), incremental refresh (265=1), bids, offers and trades, and the
        MDEntryTypes ``more_types`` (the terminal client's: a call's indicative entries)."""
        symbol = _text("symbol", cmd.symbol)
        if symbol in self.subscriptions:
            raise CommandError(f"already subscribed to {symbol} (MDReqID {self.subscriptions[symbol]})")
        depth = cmd.value or "0"
        if not depth.isdigit() or int(depth) > MAX_DEPTH:
            raise CommandError(f"MarketDepth {depth!r} is not a whole number from 0 to {MAX_DEPTH}")
        self._n += 1
        req_id = f"{self.prefix}md{self._n}"
        self.subscriptions[symbol] = req_id
        types = (*MD_ENTRY_TYPES, *(t for t in more_types if t not in MD_ENTRY_TYPES))
        return "V", [(262, req_id), (263, "1"), (264, str(int(depth))), (265, "1"),
                     (267, [[(269, t)] for t in types]), (146, [[(55, symbol)]])]

    def md_unsubscribe(self, cmd: LabCommand) -> tuple[str, Fields]:
        """MsgType and fields of a MarketDataRequest (35=V, 263=2) ending a symbol's subscription."""
        req_id = self.subscriptions.pop(cmd.symbol, None)
        if req_id is None:
            raise CommandError(f"not subscribed to {cmd.symbol!r}: nothing to unsubscribe")
        return "V", [(262, req_id), (263, "2"), (264, "0"),
                     (267, [[(269, t)] for t in MD_ENTRY_TYPES]), (146, [[(55, cmd.symbol)]])]

    def on_md_reject(self, f: dict[int, str]) -> None:
        """A MarketDataRequestReject (35=Y): the subscription it names never started."""
        req_id = f.get(262, "")
        for symbol, rid in list(self.subscriptions.items()):
            if rid == req_id:
                del self.subscriptions[symbol]

    # ------------------------------------------------------------------ ExecutionReports -> state

    def on_execution_report(self, f: dict[int, str]) -> None:
        """Apply an ExecutionReport (35=8) the session received, given its fields by tag."""
        if is_unknown_status(f):
            return  # a status answer for an order the exchange does not know: nothing to follow
        clordid = f.get(11, "")
        orig = f.get(41, "")
        order = self._orders.get(clordid)
        if order is None and orig in self._orders:
            order = self._orders[orig]
            if f.get(150) == "5":  # Replaced: the order goes on under the replace's ClOrdID
                del self._orders[orig]
                order.clordid = clordid
                self._remember(order)
        if order is None:
            if not clordid:
                return
            side = f.get(54, "")
            order = _Order(clordid, f.get(55, ""), int(side) if side.isdigit() else 0, f.get(44, ""), 0)
            self._remember(order)
        if f.get(37) and f.get(37) != "NONE":
            order.order_id = f[37]
        if f.get(150) == "5" or order.status == PENDING_NEW:
            order.price = f.get(44, order.price)
            qty = f.get(38, "")
            if qty.lstrip("-").isdigit():
                order.qty = int(qty)
        order.status = f.get(39, order.status)
        for tag, attr in ((14, "cum_qty"), (151, "leaves_qty")):
            value = f.get(tag, "")
            with contextlib.suppress(ValueError):
                setattr(order, attr, int(float(value)))
