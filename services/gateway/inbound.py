"""FIX order messages in, bus commands out: pure functions over strings, no QuickFIX, no Redis.

The text of an application message (``message.toString()``) is split into a dict of tag -> value
strings by ``shared.fix.codec.split_fields``, then turned into a bus command, or into the gateway's
own refusal (a rejected ExecutionReport, an OrderCancelReject or an OrderMassCancelReport, from tag
35 on) when the request can never be valid here (not a limit order, a price off the tick grid, an
unknown TIF or symbol, a mass cancel type not offered...). The refusal echoes what the client sent,
as text, even where it is not valid here, so the client can match it. The intake's common case, a
valid NewOrderSingle, has a faster way in (``Inbound.new_order``: the chosen fields read by
``shared.fix.reader``, checked by the same helpers), which answers None for anything else.

Messages: NewOrderSingle (D), OrderCancelRequest (F), OrderCancelReplaceRequest (G), and
OrderStatusRequest (H) -> StatusRequest, OrderMassCancelRequest (q) -> MassCancel: like orders, they
go to the shard of their symbol, except a mass cancel of every order (530=7), which goes to every
shard (the intake routes a command with no symbol to all of them).
Prices on the wire are decimals; inside they are integer ticks, converted with Decimal, never float.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import cast

from shared.config import Instrument
from shared.fix.codec import SOH_TEXT as SOH
from shared.fix.codec import MalformedMessage
from shared.fix.reader import TEXT, field_reader
from shared.schema import (
    AT_CLOSE,
    AT_OPEN,
    BUY,
    CXL_OTHER,
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
    REJ_INCORRECT_QUANTITY,
    REJ_OTHER,
    REJ_UNKNOWN_SYMBOL,
    RESPONSE_TO_CANCEL,
    RESPONSE_TO_REPLACE,
    SELL,
    STP_OFF,
    CancelOrder,
    MassCancel,
    NewOrder,
    ReplaceOrder,
    StatusRequest,
)

NEW_ORDER = "D"
CANCEL = "F"
REPLACE = "G"
STATUS = "H"
MASS_CANCEL = "q"
HANDLED_TYPES = frozenset((NEW_ORDER, CANCEL, REPLACE, STATUS, MASS_CANCEL))
NO_ORDER_ID = "NONE"
STATUS_EXEC_ID = "0"  # FIX 4.4: ExecID is 0 on an ExecutionReport of ExecType I (order status)
REJ_UNKNOWN_ORDER = 5  # OrdRejReason
# MassCancelRejectReason (532) values the gateway's refusals use.
MASS_REJ_UNKNOWN_SECURITY = 1
MASS_REJ_OTHER = 99

# What a received message becomes on the bus: each names its symbol ("" for every symbol).
Translated = NewOrder | CancelOrder | ReplaceOrder | StatusRequest | MassCancel

_SIDES = {"1": BUY, "2": SELL}
_TIFS = {"0": DAY, "1": GTC, "2": AT_OPEN, "3": IOC, "4": FOK, "7": AT_CLOSE}
# OrdType (40): market (1) and stop (3) carry no Price (44); stop (3) and stop-limit (4) need StopPx (99).
_ORD_TYPES = {"1": ORD_MARKET, "2": ORD_LIMIT, "3": ORD_STOP, "4": ORD_STOP_LIMIT}
_PRICED = frozenset((ORD_LIMIT, ORD_STOP_LIMIT))
_STOPS = frozenset((ORD_STOP, ORD_STOP_LIMIT))

# The fast path's reader (Inbound.new_order): every field a NewOrderSingle's translation reads, as
# text, checked and converted by the same helpers as the split_fields path so results are identical.
# TimeInForce (59) is optional (Day when absent) and the reader's fields are not: a second reader
# without it serves a message where "59=" appears nowhere, so surely has no tag 59.
_D_TAGS = (35, 49, 34, 11, 55, 54, 40, 44, 38)
_READ_D = field_reader(tuple((tag, TEXT) for tag in (*_D_TAGS, 59)))
_READ_D_DAY = field_reader(tuple((tag, TEXT) for tag in _D_TAGS))
_D_MARK = SOH + "35=D" + SOH  # cheap pre-check: a message without it takes the general path


@dataclass(frozen=True, slots=True)
class Refusal:
    """The gateway answers a command itself: ``body`` is a whole message from tag 35 on."""

    session: str
    body: str
    text: str


def fix_time(ns: int) -> str:
    """UTCTimestamp with milliseconds, as FIX 4.4 writes it."""
    secs, rem = divmod(ns, 1_000_000_000)
    return time.strftime("%Y%m%d-%H:%M:%S", time.gmtime(secs)) + f".{rem // 1_000_000:03d}"


class Inbound:
    """Turn FIX application messages (NewOrderSingle, cancel, replace) into bus commands or refusals."""

    def __init__(self, instruments: Iterable[Instrument], reply_to: str, id_prefix: str = "",
                 stp: Mapping[str, int] | None = None) -> None:
        self.instruments = {i.symbol: i for i in instruments}
        # Each session's self-trade prevention (sessions.stp_modes): it travels on its NewOrders.
        self.stp: Mapping[str, int] = stp or {}
        if not self.instruments:
            raise ValueError("no instruments")
        self.reply_to = reply_to
        self.id_prefix = id_prefix or reply_to
        self._exec_ids = itertools.count(1)  # next() is atomic under the GIL: two threads use it
        self._ticks_cache: dict[tuple[str, str], int | str] = {}

    def set_stp(self, session: str, mode: int) -> None:
        """Change a session's self-trade prevention for the orders translated from now on."""
        # A new mapping, swapped in whole: the engine thread may be reading the old one.
        self.stp = {**self.stp, session: mode}

    def command(self, msg_type: str, f: dict[str, str], ts: int) -> Translated | Refusal:
        """Translate one application message (fields from ``shared.fix.codec.split_fields``)."""
        session = f.get("49", "")
        if msg_type == NEW_ORDER:
            return self._new_order(session, f, ts)
        if msg_type == CANCEL:
            return self._cancel(session, f, ts)
        if msg_type == REPLACE:
            return self._replace(session, f, ts)
        if msg_type == STATUS:
            return self._status(session, f, ts)
        if msg_type == MASS_CANCEL:
            return self._mass_cancel(session, f, ts)
        raise ValueError(f"MsgType {msg_type!r} is not an order message")

    def new_order(self, text: str, ts: int) -> NewOrder | None:
        """The NewOrder of a valid NewOrderSingle's text, read by ``shared.fix.reader``: exactly
        what ``command`` makes of ``split_fields(text)``. None for everything else (another type, a
        message to refuse or not readable so, a missing 34, 49 or 11, "59=" in a value of a message
        without tag 59, non-ASCII text): the caller then takes ``split_fields`` and ``command``.

        Measured (``python -m benchmarks.intake --translate-only 20000``, best of 15 interleaved
        rounds, CPython 3.11, shared 2-core VM): Publisher.group per order 6.5 us against 8.6 on the
        split_fields path with 59=0 (0.75), 6.6 against 8.4 without 59 (0.79).
        """
        if _D_MARK not in text or not text.isascii():
            return None
        day = "59=" not in text
        try:
            values = cast(tuple[str, ...], (_READ_D_DAY if day else _READ_D)(text.encode()))
        except MalformedMessage:
            return None
        msg_type, session, seq_raw, clordid, symbol, side_raw, ord_type, px_raw, qty_raw = values[:9]
        inst = self.instruments.get(symbol)
        side = _SIDES.get(side_raw)
        tif = DAY if day else _TIFS.get(values[9])
        if msg_type != NEW_ORDER or inst is None or side is None or ord_type != "2" or tif is None:
            return None
        ticks = self._ticks(inst, px_raw)
        qty = _whole(qty_raw)
        if isinstance(ticks, str) or qty is None or qty < 1:
            return None
        return NewOrder(session, clordid, symbol, side, ticks, qty, tif, self.reply_to,
                        int(seq_raw) if seq_raw.isdigit() else 0, ts, self.stp.get(session, STP_OFF))

    def _new_order(self, session: str, f: dict[str, str], ts: int) -> NewOrder | Refusal:
        clordid = f.get("11", "")
        symbol = f.get("55", "")
        side_raw = f.get("54", "")
        problem, reason, inst, side, price, qty = self._order_terms(f, symbol, side_raw, new=True)
        tif = DAY
        ord_type, stop_px = ORD_LIMIT, 0
        if problem is None:
            assert inst is not None
            ord_type = _ORD_TYPES[f["40"]]
            if ord_type in _STOPS:
                stop_raw = f.get("99")
                if stop_raw is None:
                    problem, reason = (f"a stop order (40={f['40']}) needs a StopPx (99)", REJ_OTHER)
                else:
                    stop = self._ticks(inst, stop_raw, 99, "StopPx")
                    if isinstance(stop, str):
                        problem, reason = stop, REJ_OTHER
                    else:
                        stop_px = stop
        if problem is None:
            tif_raw = f.get("59")
            if tif_raw is not None:
                tif_val = _TIFS.get(tif_raw)
                if tif_val is None:
                    problem, reason = (f"TimeInForce 59={tif_raw} is not supported: use 0 (Day), 1 (GTC), "
                                       "2 (At the Opening), 3 (IOC), 4 (FOK) or 7 (At the Close)", REJ_OTHER)
                else:
                    tif = tif_val
        if problem is not None:
            return Refusal(session, self._reject_body(f, reason, problem, ts), problem)
        assert inst is not None
        return NewOrder(session, clordid, symbol, side, price, qty, tif, self.reply_to,
                        _seq(f), ts, self.stp.get(session, STP_OFF), ord_type, stop_px)

    def _order_terms(self, f: dict[str, str], symbol: str, side_raw: str, new: bool = False
                     ) -> tuple[str | None, int, Instrument | None, int, int, int]:
        """Check symbol, side, type, price and quantity: (problem, OrdRejReason, inst, side, ticks, qty).

        ``new``: a NewOrderSingle, which may be a market (1), stop (3) or stop-limit (4) order, whose
        price is 0 when it has none (market and stop); a replace amends limit orders only."""
        inst = self.instruments.get(symbol)
        if inst is None:
            known = ", ".join(self.instruments)
            return f"unknown symbol {symbol!r}: this exchange trades {known}", REJ_UNKNOWN_SYMBOL, \
                None, 0, 0, 0
        side = _SIDES.get(side_raw)
        if side is None:
            return f"Side 54={side_raw} is not supported: use 1 (Buy) or 2 (Sell)", REJ_OTHER, None, 0, 0, 0
        ord_type = f.get("40", "")
        kind = _ORD_TYPES.get(ord_type) if new else (ORD_LIMIT if ord_type == "2" else None)
        if kind is None:
            text = (f"OrdType 40={ord_type} is not accepted: use 1 (Market), 2 (Limit), 3 (Stop) or "
                    "4 (Stop limit)" if new else
                    f"OrdType 40={ord_type} is not accepted on a replace: only limit orders (40=2) "
                    "are amended")
            return text, REJ_OTHER, None, 0, 0, 0
        px_raw = f.get("44")
        ticks: int | str = 0
        if kind in _PRICED:
            if px_raw is None:
                what = "a limit order" if kind == ORD_LIMIT else "a stop-limit order (40=4)"
                return f"{what} needs a Price (44)", REJ_OTHER, None, 0, 0, 0
            ticks = self._ticks(inst, px_raw)
        elif px_raw is not None:
            ticks = (f"Price 44={px_raw} has no meaning on a market order (40=1): leave it out"
                     if kind == ORD_MARKET else
                     f"Price 44={px_raw} has no meaning on a stop order (40=3): use StopPx (99), or "
                     "40=4 (Stop limit) for a limit price")
        if isinstance(ticks, str):
            return ticks, REJ_OTHER, None, 0, 0, 0
        qty_raw = f.get("38")
        if qty_raw is None:
            return "OrderQty (38) is required", REJ_INCORRECT_QUANTITY, None, 0, 0, 0
        qty = _whole(qty_raw)
        if qty is None or qty < 1:
            return (f"OrderQty 38={qty_raw} is not a whole number of units of at least 1",
                    REJ_INCORRECT_QUANTITY, None, 0, 0, 0)
        return None, 0, inst, side, ticks, qty

    def _ticks(self, inst: Instrument, px_raw: str, tag: int = 44, name: str = "Price") -> int | str:
        """Price in ticks, or the reason it is refused (cached: clients repeat a few prices); ``tag``
        and ``name``: the field's, for the reason."""
        key = (inst.symbol, px_raw) if tag == 44 else (f"{tag}:{inst.symbol}", px_raw)
        hit = self._ticks_cache.get(key)
        if hit is not None:
            return hit
        result: int | str
        try:
            price = Decimal(px_raw)
        except InvalidOperation:
            price = Decimal("NaN")
        if not price.is_finite():
            result = f"{name} {tag}={px_raw} is not a decimal number"
        elif price <= 0:
            result = f"{name} {tag}={px_raw} must be positive"
        else:
            ticks = inst.to_ticks(price)
            result = (ticks if ticks is not None else
                      f"{name} {tag}={px_raw} is not a whole number of ticks of {inst.tick} "
                      f"for {inst.symbol}")
        if len(self._ticks_cache) > 10_000:
            self._ticks_cache.clear()
        self._ticks_cache[key] = result
        return result

    def _cancel(self, session: str, f: dict[str, str], ts: int) -> CancelOrder | Refusal:
        symbol = f.get("55", "")
        if symbol not in self.instruments:
            text = f"unknown symbol {symbol!r}: no such order"
            body = self._cancel_reject_body(f, RESPONSE_TO_CANCEL, CXL_UNKNOWN_ORDER, text, ts)
            return Refusal(session, body, text)
        return CancelOrder(session, f.get("11", ""), f.get("41", ""), symbol, _SIDES.get(f.get("54", ""), 0),
                           self.reply_to, _seq(f), ts)

    def _replace(self, session: str, f: dict[str, str], ts: int) -> ReplaceOrder | Refusal:
        symbol = f.get("55", "")
        problem, _reason, _inst, side, price, qty = self._order_terms(f, symbol, f.get("54", ""))
        tif_raw = f.get("59")
        if problem is None and tif_raw is not None and _TIFS.get(tif_raw) in (None, IOC, FOK):
            # A replace keeps the order's TimeInForce; IOC and FOK orders never rest to be replaced.
            problem = (f"TimeInForce 59={tif_raw} is not accepted on a replace: an order keeps its own, "
                       "and IOC (3) or FOK (4) orders never rest")
        if problem is not None:
            reason = CXL_UNKNOWN_ORDER if symbol not in self.instruments else CXL_OTHER
            return Refusal(session, self._cancel_reject_body(f, RESPONSE_TO_REPLACE, reason, problem, ts),
                           problem)
        return ReplaceOrder(session, f.get("11", ""), f.get("41", ""), symbol, side, price, qty,
                            self.reply_to, _seq(f), ts)

    def _status(self, session: str, f: dict[str, str], ts: int) -> StatusRequest | Refusal:
        symbol = f.get("55", "")
        side_raw = f.get("54", "")
        side = _SIDES.get(side_raw)
        if symbol not in self.instruments:
            known = ", ".join(self.instruments)
            problem = (f"unknown symbol {symbol!r}: this exchange trades {known}" if symbol else
                       f"an OrderStatusRequest needs a Symbol (55): this exchange trades {known}")
            return Refusal(session, self._status_body(f, REJ_UNKNOWN_SYMBOL, problem, ts), problem)
        if side is None:
            problem = f"Side 54={side_raw} is not supported: use 1 (Buy) or 2 (Sell)"
            return Refusal(session, self._status_body(f, REJ_OTHER, problem, ts), problem)
        return StatusRequest(session, f.get("11", ""), f.get("37", ""), symbol, side, f.get("790", ""),
                             self.reply_to, _seq(f), ts)

    def _mass_cancel(self, session: str, f: dict[str, str], ts: int) -> MassCancel | Refusal:
        kind = f.get("530", "")
        symbol = f.get("55", "")
        side_raw = f.get("54")
        side = 0 if side_raw is None else _SIDES.get(side_raw)
        problem, reason = None, MASS_REJ_OTHER
        if kind == str(MASS_CANCEL_SYMBOL):
            if symbol not in self.instruments:
                reason = MASS_REJ_UNKNOWN_SECURITY
                problem = (f"unknown symbol {symbol!r}: this exchange trades {', '.join(self.instruments)}"
                           if symbol else "MassCancelRequestType 530=1 needs a Symbol (55)")
        elif kind == str(MASS_CANCEL_ALL):
            symbol = ""  # every order of the session, whatever instrument the request names
        else:
            problem = (f"MassCancelRequestType 530={kind} is not supported: use 1 (one symbol, with 55) "
                       "or 7 (all orders), each with Side (54) to cancel one side only")
        if problem is None and side is None:
            problem = f"Side 54={side_raw} is not supported: use 1 (Buy) or 2 (Sell), or leave it out"
        if problem is not None:
            return Refusal(session, self.mass_cancel_refusal_body(f, reason, problem, ts), problem)
        assert side is not None
        return MassCancel(session, f.get("11", ""), int(kind), symbol, side, self.reply_to, _seq(f), ts)

    def refusal(self, msg_type: str, f: dict[str, str], text: str, ts: int) -> Refusal:
        """The gateway's own refusal of an order message (e.g. when its queue is full)."""
        session = f.get("49", "")
        if msg_type == NEW_ORDER:
            return Refusal(session, self._reject_body(f, REJ_OTHER, text, ts), text)
        if msg_type == STATUS:
            return Refusal(session, self._status_body(f, REJ_OTHER, text, ts), text)
        if msg_type == MASS_CANCEL:
            return Refusal(session, self.mass_cancel_refusal_body(f, MASS_REJ_OTHER, text, ts), text)
        response_to = RESPONSE_TO_CANCEL if msg_type == CANCEL else RESPONSE_TO_REPLACE
        return Refusal(session, self._cancel_reject_body(f, response_to, CXL_OTHER, text, ts), text)

    def busy(self, msg_type: str, f: dict[str, str], waiting: int, ts: int) -> Refusal:
        """The refusal of an order message the exchange cannot take now: ``waiting`` are queued."""
        text = (f"exchange busy: {waiting} commands are waiting for the order bus; "
                "this one was not accepted, send it again later")
        return self.refusal(msg_type, f, text, ts)

    def _exec_id(self) -> str:
        return f"{self.id_prefix}-{next(self._exec_ids)}"

    def _reject_body(self, f: dict[str, str], reason: int, text: str, ts: int) -> str:
        # Echo what the client sent (as text, even when it is not valid here) so it can match the reply.
        side = f.get("54", "1")
        parts = ["35=8", "37=" + NO_ORDER_ID, "17=" + self._exec_id(), "11=" + f.get("11", "NONE"),
                 "150=8", "39=8", "55=" + (f.get("55") or "NONE"), "54=" + side]
        qty = f.get("38")
        if qty is not None:
            parts.append("38=" + qty)
        ord_type = f.get("40")
        if ord_type is not None:
            parts.append("40=" + ord_type)
        px = f.get("44")
        if px is not None:
            parts.append("44=" + px)
        stop_px = f.get("99")
        if stop_px is not None:
            parts.append("99=" + stop_px)
        parts += ["151=0", "14=0", "6=0", "60=" + self._time(ts), "58=" + clean_text(text), f"103={reason}"]
        return SOH.join(parts) + SOH

    def _status_body(self, f: dict[str, str], reason: int, text: str, ts: int) -> str:
        """An order status ExecutionReport (150=I) saying the request cannot be answered: 39=8."""
        parts = ["35=8", "37=" + (f.get("37") or NO_ORDER_ID), "17=" + STATUS_EXEC_ID,
                 "11=" + f.get("11", "NONE"), "150=I", "39=8", "55=" + (f.get("55") or "NONE"),
                 "54=" + f.get("54", "1"), "151=0", "14=0", "6=0", "60=" + self._time(ts),
                 "58=" + clean_text(text), f"103={reason}"]
        req_id = f.get("790")
        if req_id:
            parts.append("790=" + req_id)
        return SOH.join(parts) + SOH

    def mass_cancel_refusal_body(self, f: dict[str, str], reason: int, text: str, ts: int) -> str:
        """An OrderMassCancelReport (35=r) refusing the request: 531=0 with 532 and Text."""
        parts = ["35=r", "11=" + f.get("11", "NONE"), "37=" + NO_ORDER_ID, "530=" + (f.get("530") or "7"),
                 "531=0", f"532={reason}", "533=0"]
        symbol = f.get("55")
        if symbol:
            parts.append("55=" + symbol)
        side = f.get("54")
        if side:
            parts.append("54=" + side)
        parts += ["60=" + self._time(ts), "58=" + clean_text(text)]
        return SOH.join(parts) + SOH

    def _cancel_reject_body(self, f: dict[str, str], response_to: int, reason: int, text: str,
                            ts: int) -> str:
        parts = ["35=9", "37=" + NO_ORDER_ID, "11=" + f.get("11", "NONE"), "41=" + f.get("41", "NONE"),
                 "39=8", f"434={response_to}", f"102={reason}", "60=" + self._time(ts),
                 "58=" + clean_text(text)]
        return SOH.join(parts) + SOH

    def _time(self, ns: int) -> str:
        return fix_time(ns)


def _seq(f: dict[str, str]) -> int:
    raw = f.get("34", "0")
    return int(raw) if raw.isdigit() else 0


def _whole(raw: str) -> int | None:
    """A quantity that is a whole number, written as an integer or with zero decimals ("10.00")."""
    if raw.isdigit():
        return int(raw)
    try:
        value = Decimal(raw)
    except InvalidOperation:
        return None
    if not value.is_finite() or value != value.to_integral_value():
        return None
    return int(value)


def clean_text(text: str) -> str:
    """Text for tag 58: no SOH (it would end the field) and not empty."""
    cleaned = text.replace(SOH, " ").replace("\r", " ").replace("\n", " ")
    return cleaned or "rejected"
