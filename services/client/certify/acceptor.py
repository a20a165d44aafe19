"""The certification acceptor: a QuickFIX acceptor of its own (never the trading gateway's), whose
messages the script sends through the engine's real session layer.

One per run, configured with the run's one CompID (QuickFIX acceptors have no dynamic sessions), on a
loopback port only the run's tap connects to. ``send`` builds each message from a string and hands it
to ``Session.sendToTarget``; the numbers games (a MsgSeqNum too high, SequenceReset) move the engine's
own next sender number, so the engine's store and its answers to the client's ResendRequests follow.
"""

from __future__ import annotations

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


class _App(fix.Application):
    """Knows only whether the session is logged on: the tap records the wire."""

    def __init__(self) -> None:
        super().__init__()
        self.changed = threading.Condition()
        self.logged_on = False
        self.logons = 0

    def onCreate(self, sid: fix.SessionID) -> None: ...
    def toAdmin(self, msg: fix.Message, sid: fix.SessionID) -> None: ...
    def fromAdmin(self, msg: fix.Message, sid: fix.SessionID) -> None: ...
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

    def __init__(self, comp_id: str, *, port: int = 0, heartbeat_s: int = 30) -> None:
        self.comp_id = comp_id
        self.port = port or free_port()
        self.sid = fix.SessionID(BEGIN, SENDER, comp_id)
        self._app = _App()
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
