"""Order events in, FIX messages out: pure functions over strings, no QuickFIX, no Redis.

Every order event becomes the body of an ExecutionReport (35=8), an OrderCancelReject (35=9) or an
OrderMassCancelReport (35=r), as a string starting at tag 35; the adapter wraps it in a header and
QuickFIX fills in the rest. A ``Refused`` event already carries its body (the intake built it).
Prices on the wire are decimals; inside they are integer ticks, converted with Decimal, never float.

``MassCancelJoin`` makes one OrderMassCancelReport of the several that a mass cancel of every order
(530=7) gets, one from each matcher shard, and sends it before the Cancelled reports it announces.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from decimal import Decimal

from services.gateway.inbound import NO_ORDER_ID, REJ_UNKNOWN_ORDER, STATUS_EXEC_ID, clean_text
from shared.config import Instrument
from shared.schema import (
    BUY,
    MASS_CANCEL_ALL,
    ORD_LIMIT,
    SELL,
    Accepted,
    Cancelled,
    CancelRejected,
    Filled,
    MassCancelReport,
    Message,
    Refused,
    Rejected,
    Replaced,
    StatusReport,
    Triggered,
)

REJECTED_STATUS = 8  # OrdStatus
# A stop that became a market or limit order: FIX 4.4's stock dictionary has no ExecType L (Triggered
# or Activated by System), and neither has FIX 4.2's, so the exchange's own body says Restated (D),
# with 58; a FIX 5.0 SP2 session gets L (shared.fix.versions, triggered_exec_type). Nothing else the
# exchange sends is Restated.
TRIGGERED_EXEC_TYPE = "D"


class Outbound:
    """Turn order events into the FIX messages that tell a client about them."""

    def __init__(self, instruments: Iterable[Instrument],
                 trd_match_sessions: frozenset[str] = frozenset()) -> None:
        # Fills carry the match id in SecondaryExecID (527), which stock FIX 4.4 lists in
        # ExecutionReport; the sessions named here also get TrdMatchID (880), which it does not.
        self.trd_match_sessions = trd_match_sessions
        self.instruments = {i.symbol: i for i in instruments}
        if not self.instruments:
            raise ValueError("no instruments")
        self._default_tick = next(iter(self.instruments.values())).tick
        self.shards = len({i.shard for i in self.instruments.values()})  # matcher shards that answer
        self._price_cache: dict[tuple[str, int], str] = {}
        self._time_sec = -1
        self._time_text = ""

    def report(self, ev: Message) -> str:
        """The FIX message (from tag 35 on) that tells a client about an order event."""
        if isinstance(ev, Filled):
            status = "2" if ev.leaves_qty == 0 else "1"
            px = self._px(ev.symbol, ev.price)
            terms = (f"\x0140=2\x0144={px}" if ev.ord_type == ORD_LIMIT and not ev.stop_px
                     else self._terms(ev.symbol, ev.ord_type, ev.price, ev.stop_px))
            return (f"35=8\x0137={ev.order_id}\x0117={ev.exec_id}\x0111={ev.clordid}\x01150=F\x0139={status}"
                    f"\x0155={ev.symbol}\x0154={ev.side}\x0138={ev.qty}{terms}"
                    f"\x0131={self._px(ev.symbol, ev.last_px)}\x0132={ev.last_qty}\x01151={ev.leaves_qty}"
                    f"\x0114={ev.cum_qty}\x016={self._avg_px(ev.symbol, ev.cum_cost, ev.cum_qty)}"
                    f"\x0160={self._time(ev.ts)}\x01527={ev.match_id}\x01"
                    + (f"880={ev.match_id}\x01" if ev.session in self.trd_match_sessions else ""))
        if isinstance(ev, Accepted):
            px = self._px(ev.symbol, ev.price)
            terms = (f"\x0140=2\x0144={px}" if ev.ord_type == ORD_LIMIT and not ev.stop_px
                     else self._terms(ev.symbol, ev.ord_type, ev.price, ev.stop_px))
            return (f"35=8\x0137={ev.order_id}\x0117={ev.exec_id}\x0111={ev.clordid}\x01150=0\x0139=0"
                    f"\x0155={ev.symbol}\x0154={ev.side}\x0138={ev.qty}{terms}"
                    f"\x0159={ev.tif}\x01151={ev.qty}\x0114=0\x016=0\x0160={self._time(ev.ts)}\x01")
        if isinstance(ev, Cancelled):
            return (f"35=8\x0137={ev.order_id}\x0117={ev.exec_id}\x0111={ev.clordid}\x0141={ev.orig_clordid}"
                    f"\x01150=4\x0139=4\x0155={ev.symbol}\x0154={ev.side}\x0138={ev.qty}"
                    f"{self._terms(ev.symbol, ev.ord_type, ev.price, ev.stop_px)}\x01151=0\x0114={ev.cum_qty}"
                    f"\x016={self._avg_px(ev.symbol, ev.cum_cost, ev.cum_qty)}\x0160={self._time(ev.ts)}"
                    + (f"\x0158={clean_text(ev.text)}" if ev.text else "") + "\x01")
        if isinstance(ev, Replaced):
            status = "1" if ev.cum_qty > 0 else "0"
            return (f"35=8\x0137={ev.order_id}\x0117={ev.exec_id}\x0111={ev.clordid}\x0141={ev.orig_clordid}"
                    f"\x01150=5\x0139={status}\x0155={ev.symbol}\x0154={ev.side}\x0138={ev.qty}"
                    f"{self._terms(ev.symbol, ev.ord_type, ev.price, ev.stop_px)}\x01151={ev.leaves_qty}"
                    f"\x0114={ev.cum_qty}"
                    f"\x016={self._avg_px(ev.symbol, ev.cum_cost, ev.cum_qty)}\x0160={self._time(ev.ts)}\x01")
        if isinstance(ev, Rejected):
            side = ev.side if ev.side in (BUY, SELL) else BUY
            return (f"35=8\x0137={NO_ORDER_ID}\x0117={ev.exec_id}\x0111={ev.clordid}\x01150=8\x0139=8"
                    f"\x0155={ev.symbol or 'NONE'}\x0154={side}\x0138={ev.qty}"
                    f"{self._terms(ev.symbol, ev.ord_type, ev.price, ev.stop_px)}\x01151=0\x0114=0\x016=0"
                    f"\x0160={self._time(ev.ts)}\x0158={clean_text(ev.text)}\x01103={ev.reason}\x01")
        if isinstance(ev, Refused):
            return ev.body
        if isinstance(ev, Triggered):
            stop = self._px(ev.symbol, ev.stop_px)
            return (f"35=8\x0137={ev.order_id}\x0117={ev.exec_id}\x0111={ev.clordid}"
                    f"\x01150={TRIGGERED_EXEC_TYPE}\x0139=0\x0155={ev.symbol}\x0154={ev.side}\x0138={ev.qty}"
                    f"{self._terms(ev.symbol, ev.ord_type, ev.price, ev.stop_px)}"
                    f"\x01151={ev.qty}\x0114=0\x016=0"
                    f"\x0160={self._time(ev.ts)}\x0158=triggered: a trade at or through StopPx {stop}\x01")
        if isinstance(ev, CancelRejected):
            return (f"35=9\x0137={ev.order_id or NO_ORDER_ID}\x0111={ev.clordid}\x0141={ev.orig_clordid}"
                    f"\x0139={ev.status}\x01434={ev.response_to}\x01102={ev.reason}"
                    f"\x0160={self._time(ev.ts)}\x0158={clean_text(ev.text)}\x01")
        if isinstance(ev, StatusReport):
            return self._status(ev)
        if isinstance(ev, MassCancelReport):
            return self._mass_cancel(ev)
        raise TypeError(f"{type(ev).__name__} is not an order event")

    def _status(self, ev: StatusReport) -> str:
        """ExecutionReport 150=I: the order's state as the matcher holds it (39=8 with 58: unknown)."""
        side = ev.side if ev.side in (BUY, SELL) else BUY
        # FIX 4.4: ExecID is 0 on an order status report (it reports no execution).
        parts = [f"35=8\x0137={ev.order_id or NO_ORDER_ID}\x0117={STATUS_EXEC_ID}"
                 f"\x0111={ev.clordid}\x01150=I\x0139={ev.status}\x0155={ev.symbol or 'NONE'}\x0154={side}"]
        if ev.qty > 0:  # an unknown order has no quantity nor price to tell
            parts.append(f"\x0138={ev.qty}{self._terms(ev.symbol, ev.ord_type, ev.price, ev.stop_px)}")
        parts.append(f"\x01151={ev.leaves_qty}\x0114={ev.cum_qty}"
                     f"\x016={self._avg_px(ev.symbol, ev.cum_cost, ev.cum_qty)}\x0160={self._time(ev.ts)}")
        if ev.text:
            parts.append(f"\x0158={clean_text(ev.text)}")
        if ev.status == REJECTED_STATUS and ev.qty == 0:  # no such order here
            parts.append(f"\x01103={REJ_UNKNOWN_ORDER}")
        if ev.req_id:
            parts.append(f"\x01790={ev.req_id}")
        parts.append("\x01")
        return "".join(parts)

    def _mass_cancel(self, ev: MassCancelReport) -> str:
        """OrderMassCancelReport (35=r), fields in the order FIX 4.4 lists them."""
        parts = [f"35=r\x0111={ev.clordid}\x0137={ev.order_id or NO_ORDER_ID}\x01530={ev.request_type}"
                 f"\x01531={ev.response}"]
        if ev.response == 0:
            parts.append(f"\x01532={ev.reject_reason}")
        parts.append(f"\x01533={ev.affected}")
        if ev.symbol:
            parts.append(f"\x0155={ev.symbol}")
        if ev.side in (BUY, SELL):
            parts.append(f"\x0154={ev.side}")
        parts.append(f"\x0160={self._time(ev.ts)}")
        if ev.text:
            parts.append(f"\x0158={clean_text(ev.text)}")
        parts.append("\x01")
        return "".join(parts)

    def _terms(self, symbol: str, ord_type: int, price: int, stop_px: int) -> str:
        """OrdType (40), Price (44) when the order has one (not a market nor a stop order), StopPx (99)."""
        out = f"\x0140={ord_type}"
        if price > 0:
            out += f"\x0144={self._px(symbol, price)}"
        if stop_px > 0:
            out += f"\x0199={self._px(symbol, stop_px)}"
        return out

    def _px(self, symbol: str, ticks: int) -> str:
        key = (symbol, ticks)
        text = self._price_cache.get(key)
        if text is None:
            inst = self.instruments.get(symbol)
            tick = inst.tick if inst is not None else self._default_tick
            text = str(ticks * tick)
            if len(self._price_cache) > 10_000:
                self._price_cache.clear()
            self._price_cache[key] = text
        return text

    def _avg_px(self, symbol: str, cum_cost: int, cum_qty: int) -> str:
        if cum_qty == 0:
            return "0"
        inst = self.instruments.get(symbol)
        tick = inst.tick if inst is not None else self._default_tick
        q, r = divmod(cum_cost, cum_qty)
        if r == 0:
            return self._px(symbol, q)
        # Not a whole tick: exact to 10 decimal places, then trailing zeros dropped.
        avg = (Decimal(cum_cost) * tick / cum_qty).quantize(Decimal("1E-10"))
        return format(avg.normalize(), "f")

    def _time(self, ns: int) -> str:
        secs, rem = divmod(ns, 1_000_000_000)
        if secs != self._time_sec:
            self._time_sec = secs
            self._time_text = time.strftime("%Y%m%d-%H:%M:%S", time.gmtime(secs))
        return f"{self._time_text}.{rem // 1_000_000:03d}"


class _Joining:
    """The shards' reports of one mass cancel so far, and the Cancelled events held behind them."""

    __slots__ = ("affected", "answered", "first", "held", "rejected")

    def __init__(self, first: MassCancelReport) -> None:
        self.first = first
        self.answered = 0
        self.affected = 0
        self.rejected: MassCancelReport | None = None
        self.held: list[Message] = []

    def add(self, report: MassCancelReport, cancelled: Sequence[Message]) -> None:
        self.answered += 1
        self.affected += report.affected
        if report.response == 0 and self.rejected is None:
            self.rejected = report
        self.held.extend(cancelled)

    def report(self) -> MassCancelReport:
        """One report for the whole request: the sum of the orders every shard cancelled."""
        first, rejected = self.first, self.rejected
        if rejected is not None:
            return MassCancelReport(first.session, first.clordid, first.order_id, first.request_type, 0,
                                    rejected.reject_reason, self.affected, first.symbol, first.side,
                                    rejected.text, first.ts)
        return MassCancelReport(first.session, first.clordid, first.order_id, first.request_type,
                                first.response, first.reject_reason, self.affected, first.symbol,
                                first.side, first.text, first.ts)


class MassCancelJoin:
    """One OrderMassCancelReport for a mass cancel of every order (530=7) that every shard answers.

    Each of ``shards`` matcher shards answers such a request with its own MassCancelReport followed,
    in the same events, by the ``affected`` Cancelled events of the orders it cancelled (a matcher
    writes a command's events together and in order). ``feed`` holds the first shards' reports and
    those Cancelled events until the last shard answered, then gives one report (the sum of affected
    orders) followed by every held Cancelled event: the client reads r before the ERs it announces.
    Every other event passes at once, in order. Bounded: a shard holds at most the session's open
    orders per request, and at most ``max_pending`` requests wait (past that, the oldest is given as
    it stands: its report counts the shards that answered, a shard that never answers cannot hold
    the others' reports forever). Held in memory only: a gateway stopped while it holds some loses
    them (their entries were acknowledged); an OrderStatusRequest tells the client each order's state.
    """

    def __init__(self, shards: int, max_pending: int = 1000) -> None:
        if shards < 1 or max_pending < 1:
            raise ValueError("shards and max_pending must be at least 1")
        self.shards = shards
        self.max_pending = max_pending
        self._pending: OrderedDict[tuple[str, str], _Joining] = OrderedDict()

    @property
    def pending(self) -> int:
        """Requests some shard has not answered yet."""
        return len(self._pending)

    def feed(self, events: Sequence[Message]) -> Sequence[Message]:
        """The events of one stream entry (one matcher's write), in the order they must be sent."""
        if self.shards == 1:
            return events
        out: list[Message] = []
        i, n = 0, len(events)
        while i < n:
            ev = events[i]
            i += 1
            if type(ev) is not MassCancelReport or ev.request_type != MASS_CANCEL_ALL:
                out.append(ev)
                continue
            start = i
            while (i < n and i - start < ev.affected and type(events[i]) is Cancelled
                   and events[i].session == ev.session):  # type: ignore[attr-defined]
                i += 1
            key = (ev.session, ev.clordid)
            joining = self._pending.get(key)
            if joining is None:
                joining = self._pending[key] = _Joining(ev)
            joining.add(ev, events[start:i])
            if joining.answered >= self.shards:
                del self._pending[key]
                out.append(joining.report())
                out.extend(joining.held)
            elif len(self._pending) > self.max_pending:
                _key, oldest = self._pending.popitem(last=False)
                out.append(oldest.report())
                out.extend(oldest.held)
        return out
