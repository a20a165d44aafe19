"""The certification acceptor: a QuickFIX acceptor of its own (never the trading gateway's), whose
messages the script sends through the engine's real session layer.

One per run, configured with the run's one CompID (QuickFIX acceptors have no dynamic sessions), on a
loopback port only the run's tap connects to. A run that listens beyond loopback has a one-time
password: a Logon without it is refused (``RejectLogon``: a Logout whose 58 says so). ``send``
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

import quickfix as fix

from shared.fix.dictionary import installed_dictionary

log = logging.getLogger(__name__)

SOH = "\x01"
SENDER = "FIXLAB"
BEGIN = "FIX.4.4"


class CertifyError(Exception):
    """What the acceptor could not do (not logged on, the engine refused)."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def settings_text(comp_id: str, port: int, heartbeat_s: int) -> str:
    return f"""[DEFAULT]
ConnectionType=acceptor
SocketAcceptHost=127.0.0.1
SocketAcceptPort={port}
SocketReuseAddress=Y
BeginString={BEGIN}
SenderCompID={SENDER}
StartTime=00:00:00
EndTime=00:00:00
HeartBtInt={heartbeat_s}
UseDataDictionary=Y
DataDictionary={installed_dictionary()}
ResetOnLogon=Y
ResetOnLogout=Y
ResetOnDisconnect=Y
[SESSION]
TargetCompID={comp_id}
"""


WRONG_PASSWORD = "certification: wrong or missing password"


def logon_password(raw: str) -> str | None:
    """The password a Logon carries: Password (554), or RawData (96) where a FIX 4.2 client puts it
    (docs/security.md, as the gateway reads it)."""
    fields = dict(f.split("=", 1) for f in raw.split(SOH) if "=" in f)
    if fields.get("8") == "FIX.4.2":
        return fields.get("96")
    return fields.get("554")


class _App(fix.Application):
    """Knows only whether the session is logged on (the tap records the wire), and refuses a Logon
    without the run's one-time password when it has one."""

    def __init__(self, password: str | None = None) -> None:
        super().__init__()
        self.changed = threading.Condition()
        self.logged_on = False
        self.logons = 0
        self.password = password
        self.refused = 0

    def onCreate(self, sid: fix.SessionID) -> None: ...
    def toAdmin(self, msg: fix.Message, sid: fix.SessionID) -> None: ...

    def fromAdmin(self, msg: fix.Message, sid: fix.SessionID) -> None:
        if self.password is None:
            return
        try:
            raw = msg.toString()
            if f"{SOH}35=A{SOH}" not in raw:
                return
            given = logon_password(raw) or ""
            ok = hmac.compare_digest(given.encode(), self.password.encode())
        except Exception:  # anything but QuickFIX's own exceptions would end the process
            log.exception("certify: the Logon could not be read")
            ok = False
        if not ok:
            self.refused += 1
            raise fix.RejectLogon(WRONG_PASSWORD)

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
                 password: str | None = None) -> None:
        """``password``: the run's one-time password, which the client's Logon must carry (554)."""
        self.comp_id = comp_id
        self.port = port or free_port()
        self.sid = fix.SessionID(BEGIN, SENDER, comp_id)
        self._app = _App(password)
        settings = fix.SessionSettings()
        settings.setFromString(settings_text(comp_id, self.port, heartbeat_s))
        self._dictionary = fix.DataDictionary(str(installed_dictionary()))
        self._acceptor = fix.SocketAcceptor(self._app, fix.MemoryStoreFactory(), settings)
        self._lock = threading.Lock()

    def start(self) -> CertAcceptor:
        self._acceptor.start()
        return self

    def stop(self) -> None:
        self._acceptor.stop(True)

    @property
    def logged_on(self) -> bool:
        return self._app.logged_on

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

    def send(self, fields: Sequence[tuple[int, str]]) -> None:
        """Send ``fields`` (35 first, header fields such as 43 or 122 allowed) through the engine."""
        body = "".join(f"{tag}={value}{SOH}" for tag, value in fields)
        with self._lock:
            self._session()
            msg = fix.Message(f"8={BEGIN}{SOH}9=0{SOH}{body}10=000{SOH}", self._dictionary, False)
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
            msg = fix.Message(f"8={BEGIN}{SOH}9=0{SOH}{body}10=000{SOH}", self._dictionary, False)
            if not fix.Session.sendToTarget(msg, self.sid):
                raise CertifyError("the engine did not send the SequenceReset")
            session.setNextSenderMsgSeqNum(new)
            return new

    def logout(self, text: str) -> None:
        with self._lock:
            self._session().logout(text)
