"""One visitor's lab session: a QuickFIX initiator connected through its own tap.

Its FIX version is the visitor's choice at logon (``shared.fix.versions``): FIX 4.4 validates with the
lab's dictionary (settings.data_dictionary); FIX 4.2 and FIX 5.0 SP2 (FIXT.1.1, DefaultApplVerID 9)
with the gateway's acceptor files of that version, trimmed as its own sessions' (FIX50SP2.xml whole,
copied into each session by QuickFIX, costs ~56 MiB per session), or the installed ones when not
given; all strictly, chosen once, at set-up.

Every QuickFIX callback is guarded: an uncaught Python exception in one ends the whole process.
Callbacks only update in-memory state and queue messages for the outbox; they never wait on Redis.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import quickfix as fix

from services.gateway.lab.settings import LabSettings
from shared.clock import now_ns
from shared.compids import EXCHANGE_COMP_ID
from shared.fix.codec import field_values
from shared.fix.initiator import set_fields
from shared.fix.message import Fields
from shared.fix.orders import STP_NAMES, CommandError, LabOrders, stp_mode
from shared.fix.seqs import ExchangeSeqs
from shared.fix.tap import CLIENT, Tap
from shared.fix.versions import DEFAULT, FixVersion, settings_lines
from shared.schema import LabCommand, LabNotice, LabState, Message, WireRecord

log = logging.getLogger(__name__)

CONNECTING = "connecting"
LOGGED_ON = "logged_on"
LOGGED_OUT = "logged_out"
ENDED = "ended"

Emit = Callable[[Message], None]
# Sets a session's self-trade prevention in the gateway (both places its orders are translated);
# None puts back the mode the sessions file gives it.
SetStp = Callable[[str, int | None], None]


def initiator_settings(comp_id: str, port: int, settings: LabSettings, fix_version: FixVersion = DEFAULT,
                       dictionaries: Mapping[str, str] | None = None) -> fix.SessionSettings:
    """QuickFIX settings of one lab session (in-memory store, reset on logon, strict validation with the
    exchange's own dictionary, or another version's: nothing unlisted is allowed). ``dictionaries``:
    the version's dictionary settings (the gateway's acceptor files of that version); None: the
    installed files."""
    if not dictionaries:
        dictionaries = fix_version.dictionary_settings(
            settings.data_dictionary if fix_version is DEFAULT else None)
    dictionaries_text = settings_lines(dictionaries)
    text = f"""[DEFAULT]
ConnectionType=initiator
StartTime=00:00:00
EndTime=00:00:00
HeartBtInt={settings.heartbeat_s}
ReconnectInterval=2
LogonTimeout=10
LogoutTimeout=2
ResetOnLogon=Y
ResetOnLogout=Y
ResetOnDisconnect=Y
UseDataDictionary=Y
{dictionaries_text}
SocketConnectHost=127.0.0.1
SocketConnectPort={port}
[SESSION]
BeginString={fix_version.begin_string}
SenderCompID={comp_id}
TargetCompID={EXCHANGE_COMP_ID}
"""
    out = fix.SessionSettings()
    out.setFromString(text)
    return out


def message_fields(msg: fix.Message) -> dict[int, str]:
    """Tags of a QuickFIX message as strings (first value wins), via one toString()."""
    return field_values(msg.toString())


class LabSession(fix.Application):
    """One visitor's initiator session and what the lab knows about it (orders, both ends' numbers)."""

    def __init__(self, lab_id: str, comp_id: str, gateway_id: str, settings: LabSettings,
                 tap: Tap, emit: Emit, on_down: Callable[[LabSession, str], None],
                 set_stp: SetStp | None = None, fix_version: FixVersion = DEFAULT,
                 dictionaries: Mapping[str, str] | None = None) -> None:
        super().__init__()
        self.lab_id = lab_id
        self.fix_version = fix_version
        self.dictionaries = dictionaries
        self.comp_id = comp_id
        self.gateway_id = gateway_id
        self.settings = settings
        self.tap = tap
        self.emit = emit
        self.on_down = on_down
        self.set_stp = set_stp
        self.stp: int | None = None  # the mode the visitor chose; None: the sessions file's
        self.created = time.monotonic()
        self.expires_at = now_ns() + int(settings.lifetime_s * 1e9)
        self.status = CONNECTING
        self.text = ""
        self.logging_out = False
        self.orders = LabOrders(f"{lab_id[:12]}-", fix_version)
        self.exchange = ExchangeSeqs()
        self._lock = threading.Lock()
        # Held while the engine stops: outside threads must not touch a Session being deleted.
        # Callbacks never take it (they run on the engine's thread, which stop() joins).
        self._engine_lock = threading.Lock()
        # Our own SessionID: the one a callback receives belongs to the engine and may not outlive it.
        self._sid = fix.SessionID(fix_version.begin_string, comp_id, EXCHANGE_COMP_ID)
        self._created = False
        self._seqs = (1, 1)
        self._seqs_final = False
        self._initiator: fix.SocketInitiator | None = None
        self._down_reported = False
        self._stopped = False
        self.final_published = False

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Start the initiator; nothing when the session was ended first.

        Under the engine lock, as stop_engine: the session is visible to the visitor's commands before
        it starts, and a Logout at once ends it from another thread. QuickFIX's stop() on an initiator
        whose start() had not yet got going returns at once without joining the engine thread, and
        the initiator freed under that thread crashed the gateway (SIGSEGV in
        SocketInitiator::onStart, the slow-consumer test's stalled page on a loaded machine)."""
        with self._engine_lock:
            if self._stopped:
                return
            initiator = fix.SocketInitiator(self, fix.MemoryStoreFactory(),
                                            initiator_settings(self.comp_id, self.tap.port, self.settings,
                                                               self.fix_version, self.dictionaries))
            initiator.start()
            self._initiator = initiator

    def stop_engine(self) -> None:
        """Stop the initiator (it sends a Logout if still logged on, waiting up to LogoutTimeout)."""
        with self._engine_lock:
            self._refresh_seqs()
            initiator, self._initiator = self._initiator, None
            if initiator is not None:
                self.logging_out = True
                initiator.stop()
            self._stopped = True

    def logout(self, reason: str) -> bool:
        """Send a Logout; False when the session is not logged on (nothing to log out)."""
        with self._engine_lock:
            session = self._session()
            if session is None or not session.isLoggedOn():
                return False
            self.logging_out = True
            self.text = reason
            session.logout(reason)
            return True

    # ------------------------------------------------------------------ state

    def _session(self) -> Any:
        if not self._created or self._stopped:
            return None
        return fix.Session.lookupSession(self._sid)

    def _refresh_seqs(self) -> None:
        # After a Logout or disconnect the engine resets its numbers (ResetOnLogout/-Disconnect):
        # the numbers the session ended with are the ones to show.
        if self._seqs_final or self.status not in (CONNECTING, LOGGED_ON):
            return
        session = self._session()
        if session is not None:
            seqs = (session.getExpectedSenderNum(), session.getExpectedTargetNum())
            # Checked again: the engine thread may have kept the final numbers (fromAdmin, at the
            # exchange's Logout) and reset its own since the check above, and numbers read after
            # that are the reset ones (a page showed 1 after a silent session's Logout, once in CI).
            if not self._seqs_final:
                self._seqs = seqs

    def state(self) -> LabState:
        if self._engine_lock.acquire(blocking=False):  # while the engine stops, the last numbers stand
            try:
                self._refresh_seqs()
            finally:
                self._engine_lock.release()
        with self._lock:
            orders = self.orders.open_orders()
        return LabState(
            lab_id=self.lab_id, gateway_id=self.gateway_id, comp_id=self.comp_id, status=self.status,
            next_sender_seq=self._seqs[0], next_target_seq=self._seqs[1],
            exchange_next_sender_seq=self.exchange.next_sender,
            exchange_next_target_seq=self.exchange.next_target,
            heartbeat_s=self.settings.heartbeat_s, expires_at=self.expires_at,
            silent=self.tap.silent, drop_armed=self.tap.drop_next, orders=orders, text=self.text,
            ts=now_ns())

    # ------------------------------------------------------------------ the tap's records

    def on_wire(self, n: int, source: str, raw: bytes, withheld: bool, ts: int) -> None:
        if source == CLIENT:
            if not withheld:
                self.exchange.client_delivered(raw)
        else:
            self.exchange.exchange_sent(raw)
        self.emit(WireRecord(self.lab_id, n, source, raw, withheld, ts))

    # ------------------------------------------------------------------ visitor commands

    def command(self, cmd: LabCommand) -> None:
        """Carry out a visitor's command; raise CommandError with a clear text when it cannot be."""
        op = cmd.op
        if self.status == ENDED:
            raise CommandError("this lab session has ended")
        if self.logging_out and op != "logout":
            raise CommandError("this lab session is logging out")
        if op == "drop_next":
            self.tap.drop_next = True
        elif op == "silent":
            self.tap.silent = True
        elif op == "talk":
            self.tap.silent = False
        elif op == "logout":
            if not self.logout("logged out by the visitor"):
                self._report_down("logged out by the visitor before the session logged on")
        elif op in ("order", "cancel", "replace", "status", "mass_cancel", "md_subscribe", "md_unsubscribe"):
            self._send_order_message(cmd)
        elif op == "stp":
            self._set_stp(stp_mode(cmd.value))
        else:
            raise CommandError(f"unknown command {op!r}")

    def _send_order_message(self, cmd: LabCommand) -> None:
        with self._engine_lock:
            session = self._session()
            if session is None or not session.isLoggedOn():
                raise CommandError(f"cannot {cmd.op}: the session is not logged on")
            with self._lock:
                orders, ts = self.orders, now_ns()
                if cmd.op == "order":
                    msg_type, body = orders.new_order(cmd, ts)
                elif cmd.op == "cancel":
                    msg_type, body = orders.cancel(cmd, ts)
                elif cmd.op == "replace":
                    msg_type, body = orders.replace(cmd, ts)
                elif cmd.op == "status":
                    msg_type, body = orders.status(cmd)
                elif cmd.op == "mass_cancel":
                    msg_type, body = orders.mass_cancel(cmd, ts)
                elif cmd.op == "md_subscribe":
                    msg_type, body = orders.md_subscribe(cmd)
                else:
                    msg_type, body = orders.md_unsubscribe(cmd)
            self._send(msg_type, body)

    def _set_stp(self, mode: int) -> None:
        if self.set_stp is None:
            raise CommandError("self-trade prevention cannot be set on this gateway")
        self.set_stp(self.comp_id, mode)
        self.stp = mode
        self.emit(LabNotice(self.lab_id, "info", f"Self-trade prevention for {self.comp_id}: "
                            f"{STP_NAMES[mode]}. It applies to the orders you send from now on.", now_ns()))

    def reset_stp(self) -> None:
        """The session ended: its CompID goes back to the sessions file's mode for the next visitor."""
        if self.stp is not None and self.set_stp is not None:
            self.set_stp(self.comp_id, None)
            self.stp = None

    def _send(self, msg_type: str, body: Fields) -> None:
        msg = fix.Message()
        msg.getHeader().setField(35, msg_type)
        set_fields(msg, body)
        if not fix.Session.sendToTarget(msg, self._sid):
            raise CommandError("the engine did not send the message (session not logged on)")

    # ------------------------------------------------------------------ QuickFIX callbacks (guarded)

    def _report_down(self, reason: str) -> None:
        if self._down_reported:
            return
        self._down_reported = True
        if not self.text:
            self.text = reason
        self.on_down(self, reason)

    def onCreate(self, sid: fix.SessionID) -> None:
        try:
            self._created = True
        except Exception:
            log.exception("lab %s: onCreate failed", self.lab_id)

    def onLogon(self, sid: fix.SessionID) -> None:
        try:
            self.status = LOGGED_ON
            self.text = ""  # a reconnect after a failed attempt: the old reason no longer holds
        except Exception:
            log.exception("lab %s: onLogon failed", self.lab_id)

    def onLogout(self, sid: fix.SessionID) -> None:
        try:
            self._refresh_seqs()
            self.status = LOGGED_OUT
            self._report_down(self.text or "the session logged out")
        except Exception:
            log.exception("lab %s: onLogout failed", self.lab_id)

    def toAdmin(self, msg: fix.Message, sid: fix.SessionID) -> None:
        pass

    def fromAdmin(self, msg: fix.Message, sid: fix.SessionID) -> None:
        try:
            if msg.getHeader().getField(35) == "5" and not self.logging_out:
                # The engine resets its numbers (ResetOnLogout) before onLogout: keep these.
                self._refresh_seqs()
                self._seqs_final = True
                text = msg.getField(58) if msg.isSetField(58) else ""
                who = "the silent session" if self.tap.silent else "the session"
                self.text = f"the exchange logged {who} out" + (f": {text}" if text else "")
        except Exception:
            log.exception("lab %s: fromAdmin failed", self.lab_id)

    def toApp(self, msg: fix.Message, sid: fix.SessionID) -> None:
        pass

    def fromApp(self, msg: fix.Message, sid: fix.SessionID) -> None:
        try:
            msg_type = msg.getHeader().getField(35)
            if msg_type == "8":
                f = message_fields(msg)
                with self._lock:
                    self.orders.on_execution_report(f)
            elif msg_type == "Y":
                f = message_fields(msg)
                with self._lock:
                    self.orders.on_md_reject(f)
        except Exception:
            log.exception("lab %s: fromApp failed", self.lab_id)

    def on_tap_closed(self, reason: str) -> None:
        """The tap's connection ended (the exchange gave up, or the engine disconnected)."""
        if self.text or self.logging_out:
            return
        if self.status == CONNECTING:
            self.text = f"could not log on: {reason}"
        elif self.tap.silent and reason.startswith("the exchange"):
            self.text = "the exchange heard nothing from the silent session and closed the connection"
        else:
            self.text = reason
