"""The terminal client's FIX session: a QuickFIX initiator behind its own tap, and nothing else.

The TUI, the ``--plain`` line mode and the scenario runner all drive a session through this class:

    s = ClientSession("CLIENT01", on_record=print)     # exchange: 127.0.0.1:9878, TargetCompID FIXLAB
    s.start()
    s.wait_logon(5)                 # raises SessionError: one clear line (unreachable, refused, timeout)
    s.send([(35, "D"), (11, "c1"), (55, "ACORN.LAB"), (54, "1"), (60, now), (38, "10"), (40, "2"),
            (44, "99.90")])         # any message; the engine adds 8, 9, 34, 49, 56, 52 and 10
    s.drop_next()                   # the tap withholds the next message: the exchange sees a gap
    s.go_silent(); s.talk()         # withhold everything / forward again
    s.seqs()                        # (next MsgSeqNum to send, next expected), from the engine
    s.exchange_seqs()               # the exchange's own two, followed from the wire
    s.disconnect(); s.reconnect()   # Logout and a fresh engine (MemoryStore: numbers from 1)
    s.stop()                        # idempotent, bounded: Logout, LogoutTimeout 2 s, tap closed

API:

- ``Record(n, source, raw, withheld, ns)``: every message the tap saw (``source`` "client" or
  "exchange"; ``withheld``: the tap kept it back). ``on_record`` is called with each one on the tap's
  thread; ``on_status(status, text)`` on every status change (``CONNECTING``, ``LOGGED_ON``,
  ``LOGGED_OUT``: the session ended, ``text`` says why) on the engine's or the tap's thread. Both are
  guarded: an exception in one is logged, never raised into QuickFIX (which would end the process).
- ``store_dir``: a QuickFIX FileStore there, so sequence numbers survive a restart of the client
  (the exchange keeps a CLIENT session's numbers while it runs); None: MemoryStore and
  ResetOnLogon=Y (141=Y on every Logon: both ends start from 1).
- ``dictionary``: the data dictionary the engine validates with, strictly (default: the stock one the
  quickfix package installs for the session's version; the exchange sends nothing it would Reject;
  FIX 5.0 SP2's cut to the messages the exchange speaks, each kept whole, which validates those
  exactly as the stock file and loads ten times faster: ``FixVersion.client_cut``).
- ``begin``: the BeginString, which picks the version (``shared.fix.versions``): ``FIX.4.4`` (default),
  ``FIX.4.2`` (FIX42.xml), ``FIXT.1.1`` (FIX 5.0 SP2: FIXT11.xml for the session level,
  ``dictionary`` or FIX50SP2.xml for the application, DefaultApplVerID 9 on the Logon).
- ``tls``: an ``ssl.SSLContext`` (``shared.tls.client_context``): the tap speaks TLS to the exchange's
  TLS port (stunnel in front of its acceptor); the engine's side of the tap stays plain loopback.
- No automatic reconnect: a session that ended stays ended until ``reconnect()``.
- ``connect_free(comp_ids, timeout=, make=None, **kwargs)``: log on with the first CompID the exchange
  accepts (one that is logged on already, or that it does not know, is refused: the next one is
  tried); ``make(comp_id)`` builds each try's session (default ``ClientSession(comp_id, **kwargs)``).
- ``SessionError.kind``: ``UNREACHABLE``, ``REFUSED``, ``TIMEOUT`` (or "" for a command refused).
- Properties: ``status`` (``CONNECTING``/``LOGGED_ON``/``LOGGED_OUT``), ``text`` (why it ended),
  ``logged_on``, ``silent``, ``drop_armed``; ``on_record`` may be set after construction, before start.
"""

from __future__ import annotations

import logging
import ssl
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import quickfix as fix

from shared.compids import BEGIN_STRING, CLIENT_COMP_IDS, EXCHANGE_COMP_ID
from shared.fix.dictionary import DictionaryError, client_dictionary_file
from shared.fix.initiator import set_fields
from shared.fix.message import Fields
from shared.fix.seqs import ExchangeSeqs
from shared.fix.tap import CLIENT, EXCHANGE, Tap, TapLoop
from shared.fix.versions import BY_BEGIN_STRING, DEFAULT, VERSIONS, settings_lines

log = logging.getLogger(__name__)

CONNECTING = "connecting"
LOGGED_ON = "logged_on"
LOGGED_OUT = "logged_out"

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 9878
# Header fields a caller may set besides MsgType (the engine sets 8, 9, 34, 49, 56, 52 itself).
HEADER_TAGS = frozenset({35, 43, 50, 57, 97, 115, 116, 122, 128, 129, 142, 143, 144, 145, 212, 213, 347,
                         369, 627})
LOGOUT_TIMEOUT_S = 2
# Refused and unreachable: why wait_logon failed (SessionError.kind).
UNREACHABLE = "unreachable"
REFUSED = "refused"
TIMEOUT = "timeout"


@dataclass(frozen=True, slots=True)
class Record:
    """One message the tap saw: its number from 1, who sent it, its bytes, whether the tap kept it back."""

    n: int
    source: str  # CLIENT or EXCHANGE
    raw: bytes
    withheld: bool
    ns: int  # wall clock, ns


class SessionError(Exception):
    """The session could not log on or do what was asked; ``str()`` is one clear line."""

    def __init__(self, text: str, kind: str = "") -> None:
        super().__init__(text)
        self.kind = kind


OnRecord = Callable[[Record], None]
OnStatus = Callable[[str, str], None]


def settings_text(comp_id: str, tap_port: int, *, target: str, begin: str, heartbeat_s: int,
                  dictionary: Path, store_dir: Path | None, log_dir: Path | None = None,
                  transport_dictionary: Path | None = None) -> str:
    """QuickFIX settings of the client's initiator, connecting to its tap on loopback;
    ``transport_dictionary``: a FIXT.1.1 session's (``dictionary`` is then its application's)."""
    reset = "N" if store_dir is not None else "Y"
    kind = VERSIONS["5.0SP2"] if transport_dictionary is not None else DEFAULT  # FIXT.1.1's settings or not
    dictionaries = settings_lines(kind.dictionary_settings(dictionary, transport_dictionary))
    store = f"FileStorePath={store_dir}\n" if store_dir is not None else ""
    logs = f"FileLogPath={log_dir}\n" if log_dir is not None else ""
    return f"""[DEFAULT]
ConnectionType=initiator
StartTime=00:00:00
EndTime=00:00:00
HeartBtInt={heartbeat_s}
ReconnectInterval=86400
LogonTimeout=10
LogoutTimeout={LOGOUT_TIMEOUT_S}
ResetOnLogon={reset}
ResetOnLogout={reset}
ResetOnDisconnect={reset}
UseDataDictionary=Y
{dictionaries}
ValidateUserDefinedFields=Y
ValidateFieldsOutOfOrder=Y
ValidateFieldsHaveValues=Y
AllowUnknownMsgFields=N
SocketConnectHost=127.0.0.1
SocketConnectPort={tap_port}
{store}{logs}[SESSION]
BeginString={begin}
SenderCompID={comp_id}
TargetCompID={target}
"""


class _Engine(fix.Application):
    """QuickFIX's callbacks, each guarded, handed to the session."""

    def __init__(self, owner: ClientSession) -> None:
        super().__init__()
        self.owner = owner

    def onCreate(self, sid: fix.SessionID) -> None:
        pass

    def onLogon(self, sid: fix.SessionID) -> None:
        try:
            self.owner._on_logon()
        except Exception:
            log.exception("client: onLogon failed")

    def onLogout(self, sid: fix.SessionID) -> None:
        try:
            self.owner._on_logout()
        except Exception:
            log.exception("client: onLogout failed")

    def toAdmin(self, msg: fix.Message, sid: fix.SessionID) -> None:
        pass

    def fromAdmin(self, msg: fix.Message, sid: fix.SessionID) -> None:
        try:
            if msg.getHeader().getField(35) == "5":
                self.owner._on_exchange_logout(msg.getField(58) if msg.isSetField(58) else "")
        except Exception:
            log.exception("client: fromAdmin failed")

    def toApp(self, msg: fix.Message, sid: fix.SessionID) -> None:
        pass

    def fromApp(self, msg: fix.Message, sid: fix.SessionID) -> None:
        pass  # the tap's records carry every message; the engine's own copy is not needed


class ClientSession:
    """One FIX session of the terminal client: a QuickFIX initiator connected through its own tap."""

    def __init__(self, comp_id: str, *, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT,
                 target: str = EXCHANGE_COMP_ID, begin: str = BEGIN_STRING, heartbeat_s: int = 30,
                 store_dir: Path | None = None, on_record: OnRecord | None = None,
                 on_status: OnStatus | None = None, dictionary: Path | None = None,
                 tls: ssl.SSLContext | None = None) -> None:
        self.comp_id = comp_id
        self.host = host
        self.port = port
        self.target = target
        self.begin = begin
        self.heartbeat_s = heartbeat_s
        self.store_dir = store_dir
        fix_version = BY_BEGIN_STRING.get(begin)
        if fix_version is None:
            raise SessionError(f"BeginString {begin!r}: one of {', '.join(BY_BEGIN_STRING)}")
        self.fix_version = fix_version
        self.dictionary = dictionary or fix_version.app_dictionary()
        if dictionary is None and fix_version.client_cut and self.dictionary.is_file():
            try:
                self.dictionary = client_dictionary_file(self.dictionary)
            except (DictionaryError, OSError) as exc:
                raise SessionError(f"cannot cut the FIX data dictionary {self.dictionary}: {exc}") from None
        self.transport_dictionary = fix_version.transport_dictionary() if fix_version.fixt else None
        self.on_record = on_record
        self.on_status = on_status
        self.status = CONNECTING
        self.text = ""  # why the session ended (or could not log on)
        self.exchange = ExchangeSeqs()
        self._sid = fix.SessionID(begin, comp_id, target)
        self._loop = TapLoop(name="client-tap")
        self.tls = tls
        self._tap = Tap(self._loop, host, port, self._record, self._tap_closed, tls=tls)
        self._engine = _Engine(self)
        self._initiator: Any = None
        self._lock = threading.Lock()  # held while an engine starts or stops
        self._changed = threading.Condition()
        self._attempt = 0  # connection attempts, so a late event of an old one is told apart
        self._heard_exchange = False  # the exchange sent something in this attempt
        self._seqs = (1, 1)
        self._started = False
        self._stopped = False
        self._stopping_engine = False
        self._engine_on = False  # an engine of ours runs (set before it starts, cleared before it stops)
        if not self.dictionary.is_file():
            raise SessionError(f"no FIX data dictionary at {self.dictionary}")

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> ClientSession:
        """Open the tap and start the engine, which connects through it at once."""
        with self._lock:
            if self._started:
                return self
            self._started = True
            self._loop.start()
            self._tap.open()
            self._start_engine()
        return self

    def _start_engine(self) -> None:
        # Under self._lock. A fresh initiator: with a MemoryStore it starts from 1 again.
        self._attempt += 1
        self._heard_exchange = False
        self._set_status(CONNECTING, "")
        if self.store_dir is not None:
            self.store_dir.mkdir(parents=True, exist_ok=True)
        text = settings_text(self.comp_id, self._tap.port, target=self.target, begin=self.begin,
                             heartbeat_s=self.heartbeat_s, dictionary=self.dictionary,
                             store_dir=self.store_dir, transport_dictionary=self.transport_dictionary)
        settings = fix.SessionSettings()
        settings.setFromString(text)
        store = fix.FileStoreFactory(settings) if self.store_dir is not None else fix.MemoryStoreFactory()
        initiator = fix.SocketInitiator(self._engine, store, settings)
        self._engine_on = True
        initiator.start()
        self._initiator = initiator

    def _stop_engine(self, wait_idle: bool = True) -> None:
        # Under self._lock. Our own Logout, then a forced stop: QuickFIX's graceful stop() polls for the
        # logout in whole seconds, so every quit took 1-2 s however fast the exchange answered.
        initiator = self._initiator
        if initiator is None:
            return
        self._refresh_seqs()
        self._initiator = None
        self._engine_on = False
        self._stopping_engine = True
        try:
            session = fix.Session.lookupSession(self._sid)
            if session is not None and session.isLoggedOn():
                session.logout()
                with self._changed:  # onLogout comes once the exchange's Logout is in (or not: silent)
                    self._changed.wait_for(lambda: self.status != LOGGED_ON, LOGOUT_TIMEOUT_S)
            initiator.stop(True)
        finally:
            self._stopping_engine = False
        # The tap tells the end of a connection on its own thread: let it, before a new one starts.
        self._tap.hang_up()
        deadline = time.monotonic() + (3 if wait_idle else 0)
        while not self._tap.idle and time.monotonic() < deadline:
            time.sleep(0.01)

    def wait_logon(self, timeout: float = 10.0) -> None:
        """Wait until the session is logged on; raise SessionError (one clear line) when it cannot be."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while self.status != LOGGED_ON:
                if self.status == LOGGED_OUT:
                    kind = UNREACHABLE if self._tap.unreachable else REFUSED
                    raise SessionError(self.text or "the session ended before it logged on", kind)
                left = deadline - time.monotonic()
                if left <= 0:
                    where = f"{self.host}:{self.port}"
                    if self._heard_exchange:
                        why = f"the exchange at {where} did not answer the Logon of {self.comp_id}"
                    else:
                        why = f"no answer from {where}"
                    raise SessionError(f"not logged on within {timeout:g} s: {why}", TIMEOUT)
                self._changed.wait(left)

    def disconnect(self) -> None:
        """Log out and stop the engine (the tap stays, for a reconnect)."""
        with self._lock:
            if self._stopped:
                return
            if self.status != LOGGED_OUT:
                self.text = "logged out by the client"
            self._stop_engine()
        if self.status != LOGGED_OUT:
            self._set_status(LOGGED_OUT, self.text)

    def reconnect(self) -> None:
        """Stop the engine if it runs and connect again with a fresh one (does not wait for the Logon)."""
        with self._lock:
            if self._stopped:
                raise SessionError("the session was stopped")
            self._stop_engine()
            self._tap.silent = False
            self._tap.drop_next = False
            self.text = ""
            self._start_engine()

    def stop(self) -> None:
        """Log out if logged on, stop the engine and the tap. Idempotent; bounded (LogoutTimeout)."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
            self._stop_engine(wait_idle=False)  # the tap closes next, whatever it still relays
            if self._started:
                self._tap.close()
                self._loop.stop()
        if self.status != LOGGED_OUT:
            self._set_status(LOGGED_OUT, self.text or "stopped")
        with self._changed:
            self._changed.notify_all()

    def __enter__(self) -> ClientSession:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ commands

    @property
    def logged_on(self) -> bool:
        return self.status == LOGGED_ON

    @property
    def silent(self) -> bool:
        return self._tap.silent

    @property
    def drop_armed(self) -> bool:
        return self._tap.drop_next

    def send(self, fields: Sequence[tuple[int, Any]]) -> None:
        """Send one message: ``fields`` in order, MsgType (35) among them; a repeating group as
        ``(count tag, [entry fields, ...])``. Raise SessionError when the session is not logged on."""
        msg = fix.Message()
        header = msg.getHeader()
        body: Fields = []
        msg_type = ""
        for tag, value in fields:
            if tag == 35:
                msg_type = str(value)
            if tag in HEADER_TAGS and isinstance(value, str):
                header.setField(tag, value)
            else:
                body.append((tag, value))
        if not msg_type:
            raise SessionError("a message needs a MsgType (35)")
        set_fields(msg, body)
        with self._lock:
            initiator = self._initiator
            session = fix.Session.lookupSession(self._sid) if initiator is not None else None
            if session is None or not session.isLoggedOn():
                raise SessionError(f"cannot send 35={msg_type}: the session is not logged on")
            if not fix.Session.sendToTarget(msg, self._sid):
                raise SessionError(f"the engine did not send 35={msg_type}")

    def drop_next(self) -> None:
        """Withhold the next message the client's engine sends (the exchange sees a gap)."""
        self._tap.drop_next = True

    def go_silent(self) -> None:
        """Withhold everything the client's engine sends (the exchange tests, then logs it out)."""
        self._tap.silent = True

    def talk(self) -> None:
        """Forward the client's messages again."""
        self._tap.silent = False

    def seqs(self) -> tuple[int, int]:
        """The client engine's next MsgSeqNum to send and the next it expects."""
        if self._lock.acquire(blocking=False):  # while the engine stops, the last numbers stand
            try:
                self._refresh_seqs()
            finally:
                self._lock.release()
        return self._seqs

    def exchange_seqs(self) -> tuple[int, int]:
        """The exchange's next MsgSeqNum to send and to expect, followed from the wire."""
        return self.exchange.next_sender, self.exchange.next_target

    # ------------------------------------------------------------------ engine and tap events

    def _refresh_seqs(self) -> None:
        # Never takes self._lock: callbacks call it on the engine thread, which stop() joins.
        if not self._engine_on or self.status == LOGGED_OUT:
            return
        try:
            session = fix.Session.lookupSession(self._sid)
            if session is not None:
                self._seqs = (session.getExpectedSenderNum(), session.getExpectedTargetNum())
        except Exception:  # a session being deleted: the last numbers stand
            log.debug("client: no numbers from the engine", exc_info=True)

    def _set_status(self, status: str, text: str) -> None:
        with self._changed:
            if status == self.status and text == self.text:
                return
            self.status = status
            self.text = text
            self._changed.notify_all()
        if self.on_status is not None:
            try:
                self.on_status(status, text)
            except Exception:
                log.exception("client: on_status callback failed")

    def _on_logon(self) -> None:
        self._set_status(LOGGED_ON, "")

    def _on_exchange_logout(self, text: str) -> None:
        # The engine resets its numbers (ResetOnLogout) before onLogout: keep these.
        self._refresh_seqs()
        if self._stopping_engine:
            return  # the answer to our own Logout
        who = "the silent session" if self._tap.silent else "the session"
        if self.status == CONNECTING:
            self.text = f"the exchange refused the Logon of {self.comp_id}" + (f": {text}" if text else "")
        else:
            self.text = f"the exchange logged {who} out" + (f": {text}" if text else "")

    def _on_logout(self) -> None:
        if self.status == LOGGED_OUT:
            return
        self._refresh_seqs()
        self._set_status(LOGGED_OUT, self.text or "the session logged out")

    def _tap_closed(self, reason: str) -> None:
        if self.status == LOGGED_OUT or not self._engine_on:
            return  # the end of a connection we ended ourselves
        if self._tap.unreachable:
            text = reason
        elif self.text:
            text = self.text
        elif self.status == CONNECTING:
            text = (f"the exchange at {self.host}:{self.port} closed the connection without answering the "
                    f"Logon: it refused {self.comp_id} (a CompID it does not know, or one logged on already)")
        elif self._tap.silent and reason.startswith("the exchange"):
            text = "the exchange heard nothing from the silent session and closed the connection"
        else:
            text = f"connection lost: {reason}"
        self._set_status(LOGGED_OUT, text)

    def _record(self, n: int, source: str, raw: bytes, withheld: bool, ns: int) -> None:
        if source == CLIENT:
            if not withheld:
                self.exchange.client_delivered(raw)
        elif source == EXCHANGE:
            self._heard_exchange = True
            self.exchange.exchange_sent(raw)
        if self.on_record is not None:
            try:
                self.on_record(Record(n, source, raw, withheld, ns))
            except Exception:
                log.exception("client: on_record callback failed")


def connect_free(comp_ids: Iterable[str] = CLIENT_COMP_IDS, *, timeout: float = 5.0,
                 make: Callable[[str], ClientSession] | None = None, **kwargs: Any) -> ClientSession:
    """A logged-on session with the first of ``comp_ids`` the exchange accepts.

    Each try is ``make(comp_id)`` (default: ``ClientSession(comp_id, **kwargs)``), started here. A
    refused Logon (a CompID logged on already, or one the exchange does not know) tries the next; an
    unreachable exchange or a timeout ends the search at once. Raise SessionError when none logs on.
    """
    last: SessionError | None = None
    for comp_id in comp_ids:
        session = make(comp_id) if make is not None else ClientSession(comp_id, **kwargs)
        try:
            session.start()
            session.wait_logon(timeout)
            return session
        except SessionError as exc:
            session.stop()
            if exc.kind != REFUSED:
                raise
            last = exc
        except BaseException:
            session.stop()
            raise
    raise SessionError(f"no free CompID: the exchange refused every one tried ({last})", REFUSED)
