"""Trading status over FIX, pure (no QuickFIX, no Redis): SecurityStatusRequest (35=e) is answered
with a SecurityStatus (35=f) per instrument, TradingSessionStatusRequest (35=g) with a
TradingSessionStatus (35=h); with SubscriptionRequestType 263=1 the session also gets one at every
phase change (the matcher's PhaseChanged on the market stream), 263=2 ends that.

Decisions where FIX leaves a choice (bodies in FIX 4.4; shared.fix.versions says what other versions
change):
- SecurityTradingStatus (326) per phase: CONTINUOUS 17 (Ready to trade), a call (PRE_OPEN, PRE_CLOSE)
  21 (Pre-open), HALTED 2 (Trading halt), CONTINUOUS after a halt 3 (Resume), CLOSED 18 (Not available
  for trading). TradingSessionSubID (625) tells the calls apart, with FIX 5.0 SP2's values: 2 opening
  auction, 3 continuous, 4 closing auction, 5 post-trading (closed), 9 unscheduled intraday auction
  (a halt). FIX 4.2 has neither 21 nor 625: there a call is 5 (Price indication).
- The lab runs one trading session, TradingSessionID (336) "1" (Day); its TradSesStatus (340) is the
  instruments' phase when they all share one (2 Open, 4 Pre-open, 5 Pre-close, 1 Halted, 3 Closed),
  else 2 (Open). A g naming another TradingSessionID is answered about "1" all the same.
- A SecurityStatusRequest without Symbol asks about every instrument (one f each); an unknown Symbol
  gets one f with 326=20 (Unknown or invalid) and Text.
- A session holds at most MAX_SUBSCRIPTIONS of each; past that, a snapshot only, with Text saying so.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping

from shared.config import Instrument
from shared.fix.codec import SOH_TEXT as SOH
from shared.schema import PHASE_CLOSED, PHASE_CONTINUOUS, PHASE_HALTED, PHASE_PRE_CLOSE, PHASE_PRE_OPEN

SECURITY_STATUS_REQUEST = "e"
TRADING_SESSION_STATUS_REQUEST = "g"
STATUS_TYPES = frozenset((SECURITY_STATUS_REQUEST, TRADING_SESSION_STATUS_REQUEST))
TRADING_SESSION_ID = "1"  # FIX 5.0 SP2's Day (an enum there, free text before)
MAX_SUBSCRIPTIONS = 100
SNAPSHOT, SUBSCRIBE, UNSUBSCRIBE = "0", "1", "2"

UNKNOWN_SECURITY = "20"
RESUME = "3"
TRADING_STATUS = {PHASE_CLOSED: "18", PHASE_PRE_OPEN: "21", PHASE_CONTINUOUS: "17", PHASE_PRE_CLOSE: "21",
                  PHASE_HALTED: "2"}
SESSION_SUB_ID = {PHASE_CLOSED: "5", PHASE_PRE_OPEN: "2", PHASE_CONTINUOUS: "3", PHASE_PRE_CLOSE: "4",
                  PHASE_HALTED: "9"}
SESSION_STATUS = {PHASE_CLOSED: "3", PHASE_PRE_OPEN: "4", PHASE_CONTINUOUS: "2", PHASE_PRE_CLOSE: "5",
                  PHASE_HALTED: "1"}

Out = tuple[str, str]  # (session, FIX body from tag 35 on)


def _text(text: str) -> str:
    return text.replace(SOH, " ").replace("\r", " ").replace("\n", " ") or "-"


def _time(ns: int) -> str:
    secs, rem = divmod(ns, 1_000_000_000)
    return time.strftime("%Y%m%d-%H:%M:%S", time.gmtime(secs)) + f".{rem // 1_000_000:03d}"


class TradingStatus:
    """Each instrument's phase as the market stream told it, and who asked to hear of changes."""

    def __init__(self, instruments: Iterable[Instrument], max_subscriptions: int = MAX_SUBSCRIPTIONS) -> None:
        # Every instrument trades continuously until the matcher says otherwise (issue 31's default).
        self.phases: dict[str, int] = {i.symbol: PHASE_CONTINUOUS for i in instruments}
        self.resumed: set[str] = set()  # CONTINUOUS since a halt ended (326=3 until the next change)
        self.reasons: dict[str, str] = {}
        self.max_subscriptions = max_subscriptions
        self.securities: dict[str, dict[str, str]] = {}  # session -> SecurityStatusReqID -> symbol ("")
        self.sessions: dict[str, set[str]] = {}  # session -> TradSesReqIDs

    def request(self, session: str, msg_type: str, f: Mapping[str, str], ts: int) -> list[Out]:
        """Answer a SecurityStatusRequest or TradingSessionStatusRequest (fields by tag)."""
        kind = f.get("263", SNAPSHOT)
        if msg_type == SECURITY_STATUS_REQUEST:
            req_id, symbol = f.get("324", ""), f.get("55", "")
            subs = self.securities.setdefault(session, {})
            if kind == UNSUBSCRIBE:
                subs.pop(req_id, None)
                return []
            if symbol and symbol not in self.phases:
                known = ", ".join(self.phases)
                text = f"unknown symbol {symbol!r}: this exchange trades {known}"
                return [(session, self._security(req_id, symbol, None, False, text, ts))]
            note = ""
            if kind == SUBSCRIBE:
                if len(subs) < self.max_subscriptions or req_id in subs:
                    subs[req_id] = symbol
                else:
                    note = f"a snapshot only: {self.max_subscriptions} subscriptions are held already"
            symbols = [symbol] if symbol else list(self.phases)
            return [(session, self._security(req_id, s, self.phases[s], False,
                                             note or self.reasons.get(s, ""), ts)) for s in symbols]
        if msg_type == TRADING_SESSION_STATUS_REQUEST:
            req_id = f.get("335", "")
            ids = self.sessions.setdefault(session, set())
            if kind == UNSUBSCRIBE:
                ids.discard(req_id)
                return []
            note = ""
            if kind == SUBSCRIBE:
                if len(ids) < self.max_subscriptions or req_id in ids:
                    ids.add(req_id)
                else:
                    note = f"a snapshot only: {self.max_subscriptions} subscriptions are held already"
            return [(session, self._session(req_id, False, note))]
        raise ValueError(f"MsgType {msg_type!r} is not a status request")

    def phase_changed(self, symbol: str, phase: int, prev: int, reason: str, ts: int) -> list[Out]:
        """The matcher's PhaseChanged: what each subscriber is told (f for the symbol, h when the
        session's status changes)."""
        if symbol not in self.phases or phase not in TRADING_STATUS or self.phases[symbol] == phase:
            return []  # unknown, or a restatement of what is known (after a BookImage)
        before = self._session_status()
        self.phases[symbol] = phase
        self.reasons[symbol] = reason
        if prev == PHASE_HALTED and phase == PHASE_CONTINUOUS:
            self.resumed.add(symbol)
        else:
            self.resumed.discard(symbol)
        out: list[Out] = []
        for session, subs in self.securities.items():
            for req_id, wanted in subs.items():
                if wanted in ("", symbol):
                    out.append((session, self._security(req_id, symbol, phase, True, reason, ts)))
        if self._session_status() != before:
            for session, ids in self.sessions.items():
                out.extend((session, self._session(req_id, True, reason)) for req_id in sorted(ids))
        return out

    def drop_session(self, session: str) -> None:
        self.securities.pop(session, None)
        self.sessions.pop(session, None)

    def _session_status(self) -> str:
        phases = set(self.phases.values())
        return SESSION_STATUS[phases.pop()] if len(phases) == 1 else SESSION_STATUS[PHASE_CONTINUOUS]

    def _security(self, req_id: str, symbol: str, phase: int | None, unsolicited: bool, text: str,
                  ts: int) -> str:
        if phase is None:
            status, sub = UNKNOWN_SECURITY, ""
        else:
            status = RESUME if symbol in self.resumed and phase == PHASE_CONTINUOUS else TRADING_STATUS[phase]
            sub = f"625={SESSION_SUB_ID[phase]}{SOH}"
        return (f"35=f{SOH}324={req_id or 'NONE'}{SOH}55={symbol}{SOH}336={TRADING_SESSION_ID}{SOH}{sub}"
                f"325={'Y' if unsolicited else 'N'}{SOH}326={status}{SOH}60={_time(ts)}{SOH}"
                + (f"58={_text(text)}{SOH}" if text else ""))

    def _session(self, req_id: str, unsolicited: bool, text: str) -> str:
        return (f"35=h{SOH}335={req_id or 'NONE'}{SOH}336={TRADING_SESSION_ID}{SOH}"
                f"325={'Y' if unsolicited else 'N'}{SOH}340={self._session_status()}{SOH}"
                + (f"58={_text(text)}{SOH}" if text else ""))
