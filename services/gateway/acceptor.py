"""The QuickFIX application of the acceptor: every callback guarded, nothing waits on Redis.

An uncaught Python exception inside a QuickFIX callback ends the whole process (the SWIG wrapper
calls Py_Exit), so each callback catches everything except QuickFIX's own exceptions, which the engine
turns into the right answer (UnsupportedMessageType -> BusinessMessageReject).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Container, Mapping

import quickfix as fix

from services.gateway.direct import DirectIntake
from services.gateway.guard import Guard
from services.gateway.handoff import Handoff
from services.gateway.inbound import HANDLED_TYPES, Inbound, Refusal
from services.gateway.logon import REFUSED, LogonGate
from services.gateway.mdfeed import MarketFeed
from services.gateway.securities import SECURITY_LIST_REQUEST, SecurityLists
from services.gateway.silence import SilenceWatchdog
from services.gateway.status import STATUS_TYPES
from services.gateway.unsupported import REJECT, as_business_reject
from shared import hoptrace
from shared.clock import now_ns
from shared.fix.codec import split_fields
from shared.fix.engine_thread import keep_thread_state
from shared.schema import SessionEnded

log = logging.getLogger(__name__)

_HEAD = "8=FIX.4.4\x019=0\x01"
_TAIL = "10=000\x01"
MARKET_DATA_REQUEST = "V"


def to_message(body: str) -> fix.Message:
    """A QuickFIX message from a body that starts at tag 35; Session.send fills in the header."""
    return fix.Message(_HEAD + body + _TAIL, False)


class SessionRegistry:
    """Which QuickFIX session holds each client CompID, which are logged on, and how each is spoken
    to: a session of another version than FIX 4.4 gets every body through its version's dialect
    (``dialects``: by BeginString, services/gateway/dialects.py), chosen here once per session."""

    def __init__(self, dialects: Mapping[str, Callable[[str], str]] | None = None) -> None:
        self._ids: dict[str, fix.SessionID] = {}
        self._dialects_by_begin = dict(dialects or {})
        self._dialects: dict[str, Callable[[str], str]] = {}  # by CompID; none: FIX 4.4 as built
        self._begin: dict[str, str] = {}
        self._logged_on: set[str] = set()
        self._lock = threading.Lock()

    def add(self, sid: fix.SessionID) -> str:
        comp = sid.getTargetCompID().getValue()
        begin = sid.getBeginString().getValue()
        copy = fix.SessionID(begin, sid.getSenderCompID().getValue(), comp)
        with self._lock:
            self._ids[comp] = copy
            self._begin[comp] = begin
            dialect = self._dialects_by_begin.get(begin)
            if dialect is not None:
                self._dialects[comp] = dialect
        return comp

    def begin_string(self, comp: str) -> str:
        """The BeginString of ``comp``'s session ("" when there is none)."""
        return self._begin.get(comp, "")

    def profile(self, comp: str) -> tuple[str, Callable[[str], str] | None]:
        """``comp``'s BeginString and dialect (see ``dialect``)."""
        return self._begin.get(comp, ""), self._dialects.get(comp)

    def dialect(self, comp: str) -> Callable[[str], str] | None:
        """What rewrites FIX 4.4 bodies for ``comp``'s session; None: they go out as built."""
        return self._dialects.get(comp)

    def comp_of(self, sid: fix.SessionID) -> str:
        return str(sid.getTargetCompID().getValue())

    def get(self, comp: str) -> fix.SessionID | None:
        return self._ids.get(comp)

    def ids(self) -> list[fix.SessionID]:
        """Every session's SessionID, as QuickFIX created them."""
        with self._lock:
            return list(self._ids.values())

    def set_logged_on(self, comp: str, on: bool) -> None:
        with self._lock:
            if on:
                self._logged_on.add(comp)
            else:
                self._logged_on.discard(comp)

    def is_logged_on(self, comp: str) -> bool:
        return comp in self._logged_on  # a set's membership test: atomic under the GIL

    def logged_on(self) -> list[str]:
        with self._lock:
            return sorted(self._logged_on)

    def send(self, comp: str, body: str, extra: str = "") -> bool:
        """Send a message (body from tag 35) on ``comp``'s session; False when there is none.
        ``extra``: fields added after the version's dialect (a drop copy's 128 and 797)."""
        sid = self._ids.get(comp)
        if sid is None:
            return False
        dialect = self._dialects.get(comp)
        if dialect is not None:
            body = dialect(body)
        if extra:
            body += extra
        try:
            return bool(fix.Session.sendToTarget(to_message(body), sid))
        except fix.SessionNotFound:
            return False


class Counters:
    """What the health report shows; plain ints written by one thread each (the GIL suffices)."""

    def __init__(self) -> None:
        self.orders_in = 0
        self.busy = 0
        self.reports_out = 0
        self.unroutable = 0
        self.callback_errors = 0
        self.logons = 0


class GatewayApp(fix.Application):
    """QuickFIX callbacks: read the MsgType, hand the message to the publisher, answer a full pipe."""

    def __init__(self, inbound: Inbound, handoff: Handoff, registry: SessionRegistry,
                 counters: Counters, on_logon: Callable[[str], None] | None = None,
                 silence: SilenceWatchdog | None = None,
                 cancel_on_disconnect: Container[str] | None = None,
                 direct: DirectIntake | None = None,
                 fix44_types: Container[str] = frozenset(),
                 version_types: Mapping[str, Container[str]] | None = None,
                 appl_ver_ids: Mapping[str, str] | None = None,
                 market_data: MarketFeed | None = None,
                 send_groups: Callable[[str, str], bool] | None = None,
                 logon_gate: LogonGate | None = None) -> None:
        super().__init__()
        self.logon_gate = logon_gate  # passwords at Logon (services/gateway/logon.py); None: none asked
        # Sends a body with repeating groups (a SecurityList) parsed with the acceptor's dictionary
        # (mdfeed.GroupSender); None: SecurityListRequest is answered as unsupported.
        self.send_groups = send_groups
        self.market_data = market_data  # MarketDataRequest (V); None: answered as unsupported
        # The message types of FIX 4.4: those the acceptor's dictionary leaves out still get the
        # BusinessMessageReject they got when QuickFIX knew them (see unsupported.py).
        self.fix44_types = fix44_types
        # The same for the sessions of other versions, by BeginString: the types that version defines.
        self.version_types = version_types or {}
        # FIXT.1.1: the DefaultApplVerID (1137) a Logon must carry, by BeginString.
        self.appl_ver_ids = appl_ver_ids or {}
        self.direct = direct  # the light-load shortcut past the publisher (None: always the pipe)
        # The sessions whose resting orders end with them (None: every session).
        self.cancel_on_disconnect = cancel_on_disconnect
        self.silence = silence
        self.inbound = inbound
        # SecurityListRequest is answered here, at once, from the configuration (no matcher involved).
        self.securities = SecurityLists(inbound.instruments.values(), inbound.id_prefix + "-SL")
        self.handoff = handoff
        self.registry = registry
        self.logging_out = 0  # onLogout callbacks under way (the engine's thread writes it, others read)
        self.counters = counters
        self.on_logon = on_logon
        # When this process started (UTC, as OrigSendingTime reads): a NewOrderSingle resent with
        # PossDupFlag=Y and sent before it was sent to the previous gateway process (see _stale).
        self.started = time.strftime("%Y%m%d-%H:%M:%S", time.gmtime())
        # The kill switch, drop-copy sessions and risk limits (guard.py); None: nothing refused here.
        self.guard: Guard | None = None
        # Every ExecutionReport body sent to a session also goes here (the drop copy); None: nowhere.
        self.copy: Callable[[str, str], None] | None = None

    def onCreate(self, sid: fix.SessionID) -> None:
        try:
            self.registry.add(sid)
        except Exception:
            self._failed("onCreate")

    def onLogon(self, sid: fix.SessionID) -> None:
        keep_thread_state()  # the engine thread's Python state lives as long as the acceptor
        try:
            comp = self.registry.comp_of(sid)
            self.registry.set_logged_on(comp, True)
            self.counters.logons += 1
            log.info("logon (engine thread %d)", threading.get_native_id(), extra={"session": comp})
            if self.on_logon is not None:
                self.on_logon(comp)
        except Exception:
            self._failed("onLogon")

    def onLogout(self, sid: fix.SessionID) -> None:
        self.logging_out += 1  # before the registry forgets the session: Gateway.log_out_all waits on both
        try:
            comp = self.registry.comp_of(sid)
            self.registry.set_logged_on(comp, False)
            cod = self.cancel_on_disconnect
            if cod is None or comp in cod:
                log.info("logout: cancelling its resting orders", extra={"session": comp})
                self.handoff.send_command(SessionEnded(comp, self.inbound.reply_to, now_ns()))
            else:
                log.info("logout: its orders rest on (CancelOnDisconnect=N)", extra={"session": comp})
            if self.silence is not None:
                self.silence.ended(comp)
            if self.market_data is not None:
                self.market_data.session_ended(comp)
        except Exception:
            self._failed("onLogout")
        finally:
            self.logging_out -= 1

    def toAdmin(self, message: fix.Message, sid: fix.SessionID) -> None:
        try:
            msg_type = message.getHeader().getField(35)
            if msg_type == REJECT and as_business_reject(message, self._types_of(sid)):
                # As fromApp did when the engine passed it such a message: the client was heard.
                if self.silence is not None and self.silence.waiting:
                    self.silence.heard(self.registry.comp_of(sid))
            elif msg_type == "1" and self.silence is not None:
                test_req_id = message.getField(112) if message.isSetField(112) else ""
                self.silence.sent_test_request(self.registry.comp_of(sid), test_req_id)
        except Exception:
            self._failed("toAdmin")

    def _types_of(self, sid: fix.SessionID) -> Container[str]:
        if not self.version_types:
            return self.fix44_types
        return self.version_types.get(sid.getBeginString().getValue(), self.fix44_types)

    def fromAdmin(self, message: fix.Message, sid: fix.SessionID) -> None:
        if self.logon_gate is not None:
            self._check_password(message, sid, self.logon_gate)  # raises RejectLogon
        if self.appl_ver_ids:
            self._check_appl_ver_id(message, sid)  # raises RejectLogon: the engine's Logout says why
        if self.silence is None:
            return
        try:
            comp = self.registry.comp_of(sid)
            if message.getHeader().getField(35) == "A":
                hb = message.getField(108) if message.isSetField(108) else "0"
                self.silence.logon(comp, sid, int(hb) if hb.isdigit() else 0)
            else:
                self.silence.heard(comp)
        except Exception:
            self._failed("fromAdmin")

    def _check_password(self, message: fix.Message, sid: fix.SessionID, gate: LogonGate) -> None:
        """Refuse a Logon whose CompID the credentials file names without its password: 554 (and
        553) in FIX 4.4 and FIXT.1.1, RawData 96 in FIX 4.2."""
        try:
            if message.getHeader().getField(35) != "A":
                return
            comp = sid.getTargetCompID().getValue()
            username = message.getField(553) if message.isSetField(553) else None
            if message.isSetField(554):
                password: str | None = message.getField(554)
            else:
                password = message.getField(96) if message.isSetField(96) else None
            reason = gate.check(comp, username, password)
        except Exception:
            self._failed("fromAdmin")
            reason = REFUSED  # a Logon we cannot read is not let in
        if reason is not None:
            raise fix.RejectLogon(reason)

    def _check_appl_ver_id(self, message: fix.Message, sid: fix.SessionID) -> None:
        """Refuse a FIXT.1.1 Logon with another DefaultApplVerID than the one this exchange speaks
        (QuickFIX takes any; a Logon without one never gets here: the engine closes the connection,
        "Required field missing from logon" in its event log)."""
        try:
            if message.getHeader().getField(35) != "A":
                return
            wanted = self.appl_ver_ids.get(sid.getBeginString().getValue())
            if wanted is None:
                return
            got = message.getField(1137) if message.isSetField(1137) else ""
        except Exception:
            self._failed("fromAdmin")
            return
        if got != wanted:
            raise fix.RejectLogon(f"DefaultApplVerID 1137={got}: this exchange speaks FIX.5.0SP2 "
                                  f"over FIXT.1.1, 1137={wanted}")

    def toApp(self, message: fix.Message, sid: fix.SessionID) -> None:
        return None

    def fromApp(self, message: fix.Message, sid: fix.SessionID) -> None:
        # The engine thread is the gateway's bottleneck (QuickFIX's own parse and validation take
        # most of it), so it does the least possible: read the MsgType from the text and write the
        # text to the publisher process, which translates and stamps it (see handoff.py); a lone
        # order after a quiet spell goes on the bus from here instead (see direct.py).
        keep_thread_state()
        try:
            raw = message.toString()
            start = raw.find("\x0135=") + 4
            msg_type = raw[start:raw.find("\x01", start)]
        except Exception:
            self._failed("fromApp")
            return
        if hoptrace.ON and msg_type == "D":
            hoptrace.mark("gateway.received")
        if self.silence is not None and self.silence.waiting:
            try:
                self.silence.heard(self.registry.comp_of(sid))
            except Exception:
                self._failed("fromApp")
        if msg_type == SECURITY_LIST_REQUEST and self.send_groups is not None:
            try:
                self.send_groups(self.registry.comp_of(sid), self.securities.answer(split_fields(raw)))
            except Exception:
                self._failed("fromApp")
            return
        if msg_type in STATUS_TYPES and self.market_data is not None:
            try:
                self.market_data.status_request(self.registry.comp_of(sid), msg_type, raw)
            except Exception:
                self._failed("fromApp")
            return
        if msg_type == MARKET_DATA_REQUEST and self.market_data is not None:
            try:
                self.market_data.request(self.registry.comp_of(sid), raw)
            except Exception:
                self._failed("fromApp")
            return
        if msg_type not in HANDLED_TYPES:
            # The engine answers with its own BusinessMessageReject (380=3).
            raise fix.UnsupportedMessageType()
        if msg_type == "D" and "\x0143=Y\x01" in raw and self._stale(raw, sid):
            return
        guard = self.guard
        if guard is not None:
            try:
                refusal = guard.check(msg_type, raw)
            except Exception:
                self._failed("fromApp")
                return
            if refusal is not None:
                self.refuse(refusal)
                return
        try:
            self.counters.orders_in += 1
            direct = self.direct
            if (direct is not None and direct.quiet(time.monotonic()) and not self.handoff.waiting
                    and direct.publish(raw)):
                return
            if not self.handoff.send(raw):
                self.counters.busy += 1
                self._busy(msg_type, split_fields(raw))
        except Exception:
            self._failed("fromApp")

    def _stale(self, raw: str, sid: fix.SessionID) -> bool:
        """Refuse an order a client resends (PossDupFlag=Y) that it first sent before this gateway
        process started, on a session whose orders end with it; True when refused.

        The previous process may have put it on the bus and died before QuickFIX stored that it
        had received it (the engine counts a message after fromApp returns), so the client's engine
        resends it. Its session ended at this start (end_sessions_left_open) and the matcher forgot
        its ClOrdIDs with it: taken again, the order would be a second one under the same ClOrdID
        (issue 13's fault suite found it). It belongs to a session that ended: refused, like any
        order of it that was still resting.
        """
        try:
            f = split_fields(raw)
            orig = f.get("122", "")
            comp = self.registry.comp_of(sid)
            cod = self.cancel_on_disconnect
            if not orig or orig[:17] >= self.started or (cod is not None and comp not in cod):
                return False
            text = ("resent (PossDupFlag=Y) from before the exchange restarted: the session ended then "
                    "and its orders were cancelled; send it again with a new ClOrdID if you still want it")
            refusal = self.inbound.refusal("D", f, text, now_ns())
            self.refuse(refusal, quiet=True)
            log.info("refused %s: %s", f.get("11", "?"), text, extra={"session": comp})
            return True
        except Exception:
            self._failed("fromApp")
            return False

    def _busy(self, msg_type: str, f: dict[str, str]) -> None:
        refusal = self.inbound.busy(msg_type, f, self.handoff.waiting, now_ns())
        if self.guard is not None and msg_type == "D":
            self.guard.risk.release(refusal.session, f.get("11", ""))
        self.refuse(refusal, quiet=True)

    def refuse(self, refusal: Refusal, *, quiet: bool = False) -> None:
        """Answer an order message here, on the engine thread (and copy the answer to the drop copy)."""
        try:
            self.registry.send(refusal.session, refusal.body)
            if self.copy is not None:
                self.copy(refusal.session, refusal.body)
            if not quiet:
                log.info("refused: %s", refusal.text, extra={"session": refusal.session})
        except Exception:
            self._failed("fromApp")

    def _failed(self, where: str) -> None:
        self.counters.callback_errors += 1
        log.exception("error in QuickFIX callback %s (caught: the gateway stays up)", where)
