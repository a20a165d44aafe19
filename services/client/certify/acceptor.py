"""The certification acceptor: a QuickFIX acceptor of its own (never the trading gateway's), whose
messages the script sends through the engine's real session layer.

One per run, configured with the run's one CompID (QuickFIX acceptors have no dynamic sessions) and
its FIX version (``shared.fix.versions``: FIX.4.4 by default, FIX.4.2, or FIXT.1.1 with FIX 5.0 SP2 as
its application, DefaultApplVerID 9, as the gateway's own acceptor speaks them), on a loopback port
only the run's tap connects to. A run that listens beyond loopback has a one-time
password: a Logon without it is refused (``RejectLogon``: a Logout whose 58 says so), in Password
(554), or in RawData (96) for FIX 4.2, which has no 554. ``send``
builds each message from a string and hands it to ``Session.sendToTarget``; the numbers games (a
MsgSeqNum too high, SequenceReset) move the engine's own next sender number, so the engine's store
and its answers to the client's ResendRequests follow.
"""

from __future__ import annotations

import hmac
import logging
import socket
import threading
from collections.abc import Sequence
from pathlib import Path

import quickfix as fix

from shared.fix.dictionary import EXCHANGE_MESSAGES, DictionaryError, client_dictionary_file
from shared.fix.versions import APPL_VER_ID_NAME_50SP2, BY_BEGIN_STRING, DEFAULT, FixVersion, settings_lines

log = logging.getLogger(__name__)

SOH = "\x01"
SENDER = "FIXLAB"
# What a run's session carries: the exchange's messages, and News (B), which carries the instructions.
MESSAGES = EXCHANGE_MESSAGES | {"B"}
# Every engine started and not stopped, held until the process ends. A run never stops its engine
# (quickfix 1.16.0's stop races the acceptor thread: see __main__) and ends with os._exit, but its
# CertAcceptor went out of scope before that, as main returned: the SocketAcceptor, its sessions and
# its director Application were freed under the engine's running thread, and a run that had passed
# every check ended in a segfault (a fresh-clone run of tests/integration/test_certify.py, -11).
_RUNNING: set[fix.SocketAcceptor] = set()


class CertifyError(Exception):
    """What the acceptor could not do (not logged on, the engine refused)."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def dictionaries(version: FixVersion) -> tuple[Path, Path | None]:
    """The application dictionary a run of ``version`` validates with, and FIXT's session level's: the
    stock files the quickfix package installs, FIX 5.0 SP2's cut to the messages a run carries, each
    kept whole (``FixVersion.client_cut``: the whole file took seconds to load)."""
    app = version.app_dictionary()
    if version.client_cut:
        try:
            app = client_dictionary_file(app, messages=MESSAGES)
        except (DictionaryError, OSError) as exc:
            raise CertifyError(f"cannot cut the FIX data dictionary {app}: {exc}") from None
    return app, version.transport_dictionary() if version.fixt else None


def settings_text(comp_id: str, port: int, heartbeat_s: int, version: FixVersion = DEFAULT) -> str:
    app, transport = dictionaries(version)  # FIXT.1.1 as the gateway configures its 5.0 SP2 sessions
    dictionary = settings_lines(version.dictionary_settings(app, transport))
    return f"""[DEFAULT]
ConnectionType=acceptor
SocketAcceptHost=127.0.0.1
SocketAcceptPort={port}
SocketReuseAddress=Y
BeginString={version.begin_string}
SenderCompID={SENDER}
StartTime=00:00:00
EndTime=00:00:00
HeartBtInt={heartbeat_s}
UseDataDictionary=Y
{dictionary}
ResetOnLogon=Y
ResetOnLogout=Y
ResetOnDisconnect=Y
[SESSION]
TargetCompID={comp_id}
"""


WRONG_PASSWORD = "certification: wrong or missing password"
UNREADABLE = "certification: the Logon could not be read"


def logon_password(raw: str) -> str | None:
    """The password a Logon carries: Password (554), or RawData (96) where a FIX 4.2 client puts it
    (``FixVersion.password_tag``; docs/security.md, as the gateway reads it)."""
    fields = dict(f.split("=", 1) for f in raw.split(SOH) if "=" in f)
    version = BY_BEGIN_STRING.get(fields.get("8", ""), DEFAULT)
    return fields.get(str(version.password_tag))


def wrong_appl_ver_id(wanted: str, got: str) -> str:
    return (f"certification: DefaultApplVerID 1137={got}: this run speaks {APPL_VER_ID_NAME_50SP2}, "
            f"1137={wanted}")


class _App(fix.Application):
    """Knows only whether the session is logged on (the tap records the wire), and refuses a Logon
    without the run's one-time password when it has one, or (FIXT) with another DefaultApplVerID
    than ``appl_ver_id`` (QuickFIX takes any, as the gateway's acceptor found)."""

    def __init__(self, password: str | None = None, appl_ver_id: str | None = None) -> None:
        super().__init__()
        self.appl_ver_id = appl_ver_id
        self.changed = threading.Condition()
        self.logged_on = False
        self.logons = 0
        self.password = password
        self.refused = 0

    def onCreate(self, sid: fix.SessionID) -> None: ...
    def toAdmin(self, msg: fix.Message, sid: fix.SessionID) -> None: ...

    def fromAdmin(self, msg: fix.Message, sid: fix.SessionID) -> None:
        if self.password is None and self.appl_ver_id is None:
            return
        refusal = ""
        try:
            raw = msg.toString()
            if f"{SOH}35=A{SOH}" not in raw:
                return
            if self.password is not None:
                given = logon_password(raw) or ""
                if not hmac.compare_digest(given.encode(), self.password.encode()):
                    refusal = WRONG_PASSWORD
            if not refusal and self.appl_ver_id is not None:
                got = msg.getField(1137) if msg.isSetField(1137) else ""
                if got != self.appl_ver_id:
                    refusal = wrong_appl_ver_id(self.appl_ver_id, got)
        except Exception:  # anything but QuickFIX's own exceptions would end the process
            log.exception("certify: the Logon could not be read")
            refusal = WRONG_PASSWORD if self.password is not None else UNREADABLE
        if refusal:
            self.refused += 1
            raise fix.RejectLogon(refusal)

    def toApp(self, msg: fix.Message, sid: fix.SessionID) -> None: ...
    def fromApp(self, msg: fix.Message, sid: fix.SessionID) -> None: ...

    def onLogon(self, sid: fix.SessionID) -> None:
        with self.changed:
            self.logged_on = True
            self.logons += 1
            self.changed.notify_all()

    def onLogout(self, sid: fix.SessionID) -> None:
        with self.changed:
            self.logged_on = False
            self.changed.notify_all()


class CertAcceptor:
    """One CompID's acceptor on a loopback port: ``start``, ``wait_logon``, ``send``, ``stop``."""

    def __init__(self, comp_id: str, *, port: int = 0, heartbeat_s: int = 30,
                 password: str | None = None, version: FixVersion = DEFAULT) -> None:
        """``password``: the run's one-time password, which the client's Logon must carry (554, or 96
        in FIX 4.2); ``version``: the session's FIX version."""
        self.comp_id = comp_id
        self.version = version
        self.begin_string = version.begin_string
        self.port = port or free_port()
        self.sid = fix.SessionID(self.begin_string, SENDER, comp_id)
        self._app = _App(password, version.default_appl_ver_id)
        settings = fix.SessionSettings()
        settings.setFromString(settings_text(comp_id, self.port, heartbeat_s, version))
        app, transport = dictionaries(version)
        # What the script sends is parsed with them, so that its repeating groups are groups (the
        # engine stores and resends the message as parsed).
        self._dictionary = fix.DataDictionary(str(app))
        self._transport = fix.DataDictionary(str(transport)) if transport is not None else None
        self._acceptor = fix.SocketAcceptor(self._app, fix.MemoryStoreFactory(), settings)
        self._lock = threading.Lock()

    def start(self) -> CertAcceptor:
        """Start the engine; it lives, even with this object gone, until ``stop`` or the process's end."""
        self._acceptor.start()
        _RUNNING.add(self._acceptor)
        return self

    def stop(self) -> None:
        self._acceptor.stop(True)
        _RUNNING.discard(self._acceptor)

    @property
    def logged_on(self) -> bool:
        return self._app.logged_on

    @property
    def logons(self) -> int:
        """How many Logons the engine took (a refused one is not one)."""
        return self._app.logons

    def wait_logon(self, timeout_s: float) -> bool:
        with self._app.changed:
            return self._app.changed.wait_for(lambda: self._app.logged_on, timeout_s)

    def wait_logout(self, timeout_s: float) -> bool:
        with self._app.changed:
            return self._app.changed.wait_for(lambda: not self._app.logged_on, timeout_s)

    def _session(self) -> fix.Session:
        session = fix.Session.lookupSession(self.sid)
        if session is None or not session.isLoggedOn():
            raise CertifyError(f"{self.comp_id} is not logged on")
        return session

    @property
    def next_seq(self) -> int:
        """The MsgSeqNum the engine will give its next message."""
        return int(self._session().getExpectedSenderNum())

    def _message(self, body: str) -> fix.Message:
        text = f"8={self.begin_string}{SOH}9=0{SOH}{body}10=000{SOH}"
        if self._transport is not None:
            return fix.Message(text, self._transport, self._dictionary, False)
        return fix.Message(text, self._dictionary, False)

    def send(self, fields: Sequence[tuple[int, str]]) -> None:
        """Send ``fields`` (35 first, header fields such as 43 or 122 allowed) through the engine."""
        body = "".join(f"{tag}={value}{SOH}" for tag, value in fields)
        with self._lock:
            self._session()
            msg = self._message(body)
            if not fix.Session.sendToTarget(msg, self.sid):
                raise CertifyError(f"the engine did not send {fields[0][0]}={fields[0][1]}")

    def skip_seq(self, count: int) -> int:
        """Make the next MsgSeqNum ``count`` too high (the client sees a gap); return the new one."""
        with self._lock:
            session = self._session()
            new = int(session.getExpectedSenderNum()) + count
            session.setNextSenderMsgSeqNum(new)
            return new

    def sequence_reset(self, gap_fill: bool, count: int) -> int:
        """Send a SequenceReset (GapFill 123=Y, or Reset 123=N) whose NewSeqNo (36) is ``count``
        past the number it goes out with plus one, and carry on from there; return NewSeqNo."""
        with self._lock:
            session = self._session()
            new = int(session.getExpectedSenderNum()) + 1 + count
            body = f"35=4{SOH}123={'Y' if gap_fill else 'N'}{SOH}36={new}{SOH}"
            msg = self._message(body)
            if not fix.Session.sendToTarget(msg, self.sid):
                raise CertifyError("the engine did not send the SequenceReset")
            session.setNextSenderMsgSeqNum(new)
            return new

    def logout(self, text: str) -> None:
        with self._lock:
            self._session().logout(text)
