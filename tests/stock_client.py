"""A newcomer's FIX client for tests: QuickFIX with the stock FIX44.xml the quickfix package installs
(or, with ``fix_version``, FIX42.xml, or FIXT11.xml + FIX50SP2.xml) and every validation switch on,
recording what its engine received and every admin message it sent (a session Reject among them is
what the exchange must never provoke).

    with stock_sessions(tmp_path, stack.fix_port, ["CLIENT09", "CLIENT10"]) as (a, b):
        a.send("D", nos("o1", 1, 10, "99.50"))
        a.client.wait("8", lambda m: m.get(11) == "o1")
"""

from __future__ import annotations

import contextlib
import gc
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import quickfix as fix

from shared.fix.versions import settings_lines, version
from tests.helpers import eventually

SOH = "\x01"


def fields_of(raw: str) -> dict[int, str]:
    out: dict[int, str] = {}
    for item in raw.split(SOH):
        tag, _, value = item.partition("=")
        if tag.isdigit():
            out[int(tag)] = value
    return out


class StockClient(fix.Application):
    """Records what its engine received (admin and app) and every admin message it sent."""

    def __init__(self) -> None:
        super().__init__()
        self.logged_on = threading.Event()
        self.received: list[dict[int, str]] = []
        self.sent_admin: list[dict[int, str]] = []
        self.errors: list[str] = []
        self.logouts = 0
        self.lock = threading.Lock()

    def onCreate(self, sid: fix.SessionID) -> None: ...
    def onLogout(self, sid: fix.SessionID) -> None:
        self.logged_on.clear()
        with self.lock:
            self.logouts += 1
    def toApp(self, msg: fix.Message, sid: fix.SessionID) -> None: ...

    def onLogon(self, sid: fix.SessionID) -> None:
        self.logged_on.set()

    def _keep(self, into: list[dict[int, str]], msg: fix.Message) -> None:
        try:
            with self.lock:
                into.append(fields_of(msg.toString()))
        except Exception as exc:  # an exception escaping a callback would end the test process
            self.errors.append(repr(exc))

    def toAdmin(self, msg: fix.Message, sid: fix.SessionID) -> None:
        self._keep(self.sent_admin, msg)

    def fromAdmin(self, msg: fix.Message, sid: fix.SessionID) -> None:
        self._keep(self.received, msg)

    def fromApp(self, msg: fix.Message, sid: fix.SessionID) -> None:
        self._keep(self.received, msg)

    def find(self, msg_type: str, where: Callable[[dict[int, str]], bool] = lambda m: True
             ) -> dict[int, str] | None:
        return self._first(self.received, msg_type, where)

    def wait(self, msg_type: str, where: Callable[[dict[int, str]], bool] = lambda m: True,
             timeout_s: float = 10.0) -> dict[int, str]:
        """The first message of ``msg_type`` received that ``where`` accepts."""
        return self._wait(self.received, f"35={msg_type}", msg_type, where, timeout_s)

    def story(self, last: int = 12) -> str:
        """The session's state and its last messages each way, one line."""
        keys = (35, 34, 43, 11, 150, 39, 7, 16, 36, 123, 58, 371, 373)

        def brief(m: dict[int, str]) -> str:
            return " ".join(f"{k}={m[k]}" for k in keys if k in m)

        with self.lock:
            got = [brief(m) for m in self.received[-last:]]
            sent = [brief(m) for m in self.sent_admin[-last:]]
            logouts = self.logouts
        return (f"logged on: {self.logged_on.is_set()}, logouts: {logouts}; last received: {got}; "
                f"last admin sent: {sent}")

    def wait_sent(self, msg_type: str, where: Callable[[dict[int, str]], bool] = lambda m: True,
                  timeout_s: float = 10.0) -> dict[int, str]:
        """The first admin message of ``msg_type`` this client's engine sent that ``where`` accepts."""
        return self._wait(self.sent_admin, f"a sent 35={msg_type}", msg_type, where, timeout_s)

    def _first(self, messages: list[dict[int, str]], msg_type: str,
               where: Callable[[dict[int, str]], bool]) -> dict[int, str] | None:
        with self.lock:
            return next((m for m in messages if m.get(35) == msg_type and where(m)), None)

    def _wait(self, messages: list[dict[int, str]], what: str, msg_type: str,
              where: Callable[[dict[int, str]], bool], timeout_s: float) -> dict[int, str]:
        try:
            return eventually(lambda: self._first(messages, msg_type, where), timeout=timeout_s, what=what)
        except AssertionError as exc:  # say what the session saw instead, so a failure explains itself
            raise AssertionError(f"{exc}; {self.story()}") from None

    def session_rejects(self) -> list[dict[int, str]]:
        with self.lock:
            return [m for m in self.sent_admin if m.get(35) == "3"]


def stock_settings(path: Path, port: int, comps: list[str], heartbeat_s: int = 1,
                   fix_version: str = "4.4", source_host: str | None = None) -> fix.SessionSettings:
    """QuickFIX's defaults, plus every validation switch on, with the installed dictionary of
    ``fix_version`` (FIX44.xml; FIX42.xml; FIXT11.xml and FIX50SP2.xml, DefaultApplVerID 9);
    ``source_host``: the local address its socket comes from (QuickFIX's SocketConnectSourceHost)."""
    v = version(fix_version)
    sessions = "".join(f"\n[SESSION]\nBeginString={v.begin_string}\nSenderCompID={c}\nTargetCompID=FIXLAB\n"
                       for c in comps)
    dictionaries = settings_lines(v.dictionary_settings()) + "\n"
    path.write_text(
        f"[DEFAULT]\nConnectionType=initiator\nHeartBtInt={heartbeat_s}\nReconnectInterval=60\n"
        f"SocketConnectHost=127.0.0.1\nSocketConnectPort={port}\nStartTime=00:00:00\nEndTime=00:00:00\n"
        + (f"SocketConnectSourceHost={source_host}\n" if source_host else "") +
        f"ResetOnLogon=Y\nUseDataDictionary=Y\n{dictionaries}"
        "ValidateUserDefinedFields=Y\nValidateFieldsOutOfOrder=Y\nValidateFieldsHaveValues=Y\n"
        "AllowUnknownMsgFields=N\nCheckLatency=N\n" + sessions)
    return fix.SessionSettings(str(path))


def raw(comp: str, body: list[tuple[int, object]], msg_type: str, begin: str = "FIX.4.4") -> fix.Message:
    now = time.strftime("%Y%m%d-%H:%M:%S", time.gmtime())
    text = f"8={begin}{SOH}9=0{SOH}35={msg_type}{SOH}49={comp}{SOH}56=FIXLAB{SOH}52={now}{SOH}"
    text += "".join(f"{t}={v}{SOH}" for t, v in body) + f"10=000{SOH}"
    return fix.Message(text, False)


def nos(clordid: str, side: int, qty: int, price: str, handl_inst: bool = False) -> list[tuple[int, object]]:
    """A NewOrderSingle's body; ``handl_inst``: with HandlInst (21), which FIX 4.2 requires."""
    return [(11, clordid), *([(21, 1)] if handl_inst else []), (55, "ACORN.LAB"), (54, side),
            (60, time.strftime("%Y%m%d-%H:%M:%S", time.gmtime())), (38, qty), (40, 2), (44, price),
            (59, 0)]


class StockSession:
    """One logged-on session of a stock client: its application, and a way to send on it."""

    def __init__(self, comp: str, client: StockClient | None = None, fix_version: str = "4.4") -> None:
        self.comp = comp
        self.client = client if client is not None else StockClient()
        self.begin = version(fix_version).begin_string
        self.sid = fix.SessionID(self.begin, comp, "FIXLAB")
        self.initiator: fix.SocketInitiator | None = None  # set by stock_sessions

    def send(self, msg_type: str, body: list[tuple[int, object]]) -> None:
        self.send_message(raw(self.comp, body, msg_type, self.begin))

    def send_message(self, msg: fix.Message) -> None:
        """Send a message built by the caller (QuickFIX groups, say) on this session."""
        if self.initiator is None:
            assert fix.Session.sendToTarget(msg, self.sid)
            return
        # Through this initiator's own Session, not QuickFIX's process-wide registry: an initiator of
        # an earlier test with the same CompID that was not yet destroyed (stopped, waiting for the
        # collector) stays registered under the SessionID, and sendToTarget would hand the message to
        # that dead session, which stores it and sends nothing (test_cluster_faults then
        # test_two_gateways in one pytest run showed it).
        session = self.initiator.getSession(self.sid)
        assert session is not None, f"{self.comp}: no session in its initiator"
        assert session.send(msg)


@contextlib.contextmanager
def stock_sessions(workdir: Path, port: int, comps: list[str], heartbeat_s: int = 1,
                   app: Callable[[], StockClient] = StockClient,
                   fix_version: str | list[str] = "4.4",
                   source_host: str | None = None) -> Iterator[list[StockSession]]:
    """One stock initiator per CompID, logged on to 127.0.0.1:``port``; stopped on the way out.
    ``app`` makes each session's application (a StockClient that records more, for instance);
    ``fix_version``: the sessions' version, or one per CompID; ``source_host``: the address the
    sockets come from (127.0.0.2: another machine to the gateway's address rules)."""
    versions = fix_version if isinstance(fix_version, list) else [fix_version] * len(comps)
    sessions = [StockSession(comp, app(), v) for comp, v in zip(comps, versions, strict=True)]
    for s, v in zip(sessions, versions, strict=True):
        s.initiator = fix.SocketInitiator(s.client, fix.MemoryStoreFactory(),
                                          stock_settings(workdir / f"{s.comp}.cfg", port, [s.comp],
                                                         heartbeat_s, v, source_host))
    try:
        for s in sessions:
            assert s.initiator is not None
            s.initiator.start()
        for s in sessions:
            assert s.client.logged_on.wait(15), f"{s.comp} did not log on"
        yield sessions
    finally:
        for s in sessions:
            if s.initiator is not None:
                s.initiator.stop()
        # Destroy the stopped initiators now: their Sessions stay in QuickFIX's process-wide registry
        # until the C++ objects go, and the next initiator of the same CompID would be looked up
        # there and never log on (a later test's "CLIENT01 did not log on" in one pytest run).
        for s in sessions:
            s.initiator = None
        gc.collect()
