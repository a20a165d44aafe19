"""Order events in, FIX messages out: pure functions over strings, no QuickFIX, no Redis.

Every order event becomes the body of an ExecutionReport (35=8) or OrderCancelReject (35=9), as a
string starting at tag 35; the adapter wraps it in a header and QuickFIX fills in the rest. A
``Refused`` event already carries its body (the intake built it). Prices on the wire are decimals;
inside they are integer ticks, converted with Decimal, never float.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from decimal import Decimal

from services.gateway.inbound import NO_ORDER_ID, clean_text
from shared.config import Instrument
from shared.schema import (
    BUY,
    SELL,
    Accepted,
    Cancelled,
    CancelRejected,
    Filled,
    Message,
    Refused,
    Rejected,
    Replaced,
)


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
        self._price_cache: dict[tuple[str, int], str] = {}
        self._time_sec = -1
        self._time_text = ""

    def report(self, ev: Message) -> str:
        """The FIX message (from tag 35 on) that tells a client about an order event."""
        if isinstance(ev, Filled):
            status = "2" if ev.leaves_qty == 0 else "1"
            px = self._px(ev.symbol, ev.price)
            return (f"35=8\x0137={ev.order_id}\x0117={ev.exec_id}\x0111={ev.clordid}\x01150=F\x0139={status}"
                    f"\x0155={ev.symbol}\x0154={ev.side}\x0138={ev.qty}\x0140=2\x0144={px}"
                    f"\x0131={self._px(ev.symbol, ev.last_px)}\x0132={ev.last_qty}\x01151={ev.leaves_qty}"
                    f"\x0114={ev.cum_qty}\x016={self._avg_px(ev.symbol, ev.cum_cost, ev.cum_qty)}"
                    f"\x0160={self._time(ev.ts)}\x01527={ev.match_id}\x01"
                    + (f"880={ev.match_id}\x01" if ev.session in self.trd_match_sessions else ""))
        if isinstance(ev, Accepted):
            px = self._px(ev.symbol, ev.price)
            return (f"35=8\x0137={ev.order_id}\x0117={ev.exec_id}\x0111={ev.clordid}\x01150=0\x0139=0"
                    f"\x0155={ev.symbol}\x0154={ev.side}\x0138={ev.qty}\x0140=2\x0144={px}"
                    f"\x0159={ev.tif}\x01151={ev.qty}\x0114=0\x016=0\x0160={self._time(ev.ts)}\x01")
        if isinstance(ev, Cancelled):
            return (f"35=8\x0137={ev.order_id}\x0117={ev.exec_id}\x0111={ev.clordid}\x0141={ev.orig_clordid}"
                    f"\x01150=4\x0139=4\x0155={ev.symbol}\x0154={ev.side}\x0138={ev.qty}\x0140=2"
                    f"\x0144={self._px(ev.symbol, ev.price)}\x01151=0\x0114={ev.cum_qty}"
                    f"\x016={self._avg_px(ev.symbol, ev.cum_cost, ev.cum_qty)}\x0160={self._time(ev.ts)}"
                    + (f"\x0158={clean_text(ev.text)}" if ev.text else "") + "\x01")
        if isinstance(ev, Replaced):
            status = "1" if ev.cum_qty > 0 else "0"
            return (f"35=8\x0137={ev.order_id}\x0117={ev.exec_id}\x0111={ev.clordid}\x0141={ev.orig_clordid}"
                    f"\x01150=5\x0139={status}\x0155={ev.symbol}\x0154={ev.side}\x0138={ev.qty}\x0140=2"
                    f"\x0144={self._px(ev.symbol, ev.price)}\x01151={ev.leaves_qty}\x0114={ev.cum_qty}"
                    f"\x016={self._avg_px(ev.symbol, ev.cum_cost, ev.cum_qty)}\x0160={self._time(ev.ts)}\x01")
        if isinstance(ev, Rejected):
            side = ev.side if ev.side in (BUY, SELL) else BUY
            return (f"35=8\x0137={NO_ORDER_ID}\x0117={ev.exec_id}\x0111={ev.clordid}\x01150=8\x0139=8"
                    f"\x0155={ev.symbol or 'NONE'}\x0154={side}\x0138={ev.qty}\x0140=2"
                    f"\x0144={self._px(ev.symbol, ev.price)}\x01151=0\x0114=0\x016=0"
                    f"\x0160={self._time(ev.ts)}\x0158={clean_text(ev.text)}\x01103={ev.reason}\x01")
        if isinstance(ev, Refused):
            return ev.body
        if isinstance(ev, CancelRejected):
            return (f"35=9\x0137={ev.order_id or NO_ORDER_ID}\x0111={ev.clordid}\x0141={ev.orig_clordid}"
                    f"\x0139={ev.status}\x01434={ev.response_to}\x01102={ev.reason}"
                    f"\x0160={self._time(ev.ts)}\x0158={clean_text(ev.text)}\x01")
        raise TypeError(f"{type(ev).__name__} is not an order event")

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
