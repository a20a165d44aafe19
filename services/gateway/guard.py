"""What the acceptor refuses before an order message goes anywhere: a killed session's new orders, any
order of a drop-copy session, and orders past a risk limit (risk.py). Pure: no QuickFIX, no Redis.

The engine thread asks ``check`` for every order message; a session nobody watches (no kill, no drop
copy, no limits: every session by default) costs one substring search and one set lookup.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from services.gateway.inbound import CANCEL, MASS_CANCEL, NEW_ORDER, REPLACE, Inbound, Refusal, _whole
from services.gateway.risk import REJECT_REASON, RiskBook
from shared.fix.codec import split_fields
from shared.schema import BUY, REJ_BROKER_OPTION, SELL

KILLED_TEXT = ("session killed by the exchange's operator: no new orders until it is unkilled "
               "(cancels and status requests are still answered)")
DROP_COPY_TEXT = "a drop copy session receives copies of its firm's ExecutionReports and may not trade"
_SIDES = {"1": BUY, "2": SELL}


def field_of(raw: str, key: str) -> str | None:
    """The value of the first field ``key`` ("\\x0155=": SOH, tag, "=") in a message's text, or None."""
    start = raw.find(key)
    if start < 0:
        return None
    start += len(key)
    return raw[start:raw.find("\x01", start)]


def sender_of(raw: str) -> str:
    """SenderCompID (49) of a message's text."""
    start = raw.find("\x0149=")
    if start < 0:
        return ""
    start += 4
    return raw[start:raw.find("\x01", start)]


class Guard:
    """The acceptor's refusals of the kill switch, drop copy sessions and risk limits."""

    def __init__(self, inbound: Inbound, risk: RiskBook, now: Callable[[], int],
                 drop_copies: Iterable[str] = (), killed: Iterable[str] = ()) -> None:
        self.inbound = inbound
        self.now = now
        self.risk = risk
        self.drop_copies = frozenset(drop_copies)
        self.killed: frozenset[str] = frozenset(killed)
        self.watched = self._watched()

    def _watched(self) -> frozenset[str]:
        return self.risk.watched | self.drop_copies | self.killed

    def kill(self, comp: str) -> None:
        # New sets swapped in whole: the engine thread reads them without a lock.
        self.killed = self.killed | {comp}
        self.watched = self._watched()

    def unkill(self, comp: str) -> None:
        self.killed = self.killed - {comp}
        self.watched = self._watched()

    def check(self, msg_type: str, raw: str) -> Refusal | None:
        """The refusal of an order message (its whole text), or None: it may go on."""
        session = sender_of(raw)
        if session not in self.watched:
            return None
        ts = self.now()
        if session in self.drop_copies:
            if msg_type in (NEW_ORDER, CANCEL, REPLACE, MASS_CANCEL):
                return self.inbound.refusal(msg_type, split_fields(raw), DROP_COPY_TEXT, ts)
            return None
        if msg_type == NEW_ORDER:
            if session in self.killed:
                f = split_fields(raw)
                return Refusal(session, self.inbound._reject_body(f, REJ_BROKER_OPTION, KILLED_TEXT, ts),
                               KILLED_TEXT)
            return self._limits(session, raw, ts, new=True)
        if msg_type == REPLACE:
            if session in self.killed:
                return self.inbound.refusal(REPLACE, split_fields(raw), KILLED_TEXT, ts)
            return self._limits(session, raw, ts, new=False)
        return None

    def _limits(self, session: str, raw: str, ts: int, *, new: bool) -> Refusal | None:
        if session not in self.risk.watched:
            return None
        # The few fields the limits need, read from the text (splitting the whole message cost as
        # much as the checks themselves); the refusal, rare, splits it.
        symbol = field_of(raw, "\x0155=") or ""
        inst = self.inbound.instruments.get(symbol)
        side = _SIDES.get(field_of(raw, "\x0154=") or "")
        qty = _whole(field_of(raw, "\x0138=") or "")
        if inst is None or side is None or qty is None or qty < 1:
            return None  # not a valid order: the intake refuses it with its own reason
        price = field_of(raw, "\x0144=")
        collar = price is not None
        ticks: int | str | None
        if price is not None:
            ticks = self.inbound._ticks(inst, price)
        else:  # a market or stop order: valued at its StopPx, else the last trade (risk.py)
            stop = field_of(raw, "\x0199=")
            ticks = (self.inbound._ticks(inst, stop, 99, "StopPx") if stop is not None
                     else self.risk.reference(symbol))
        if isinstance(ticks, str):
            return None  # a bad price: the intake refuses it with its own reason
        if new:
            problem = self.risk.check(session, field_of(raw, "\x0111=") or "", symbol, side, ticks, qty,
                                      collar=collar)
            if problem is None:
                return None
            f = split_fields(raw)
            return Refusal(session, self.inbound._reject_body(f, REJECT_REASON, problem, ts), problem)
        problem = self.risk.check_order(session, symbol, side, ticks, qty, collar=collar)
        if problem is None:
            return None
        return self.inbound.refusal(REPLACE, split_fields(raw), problem, ts)
