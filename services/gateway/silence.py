"""Log out a session that leaves the exchange's TestRequest unanswered, with the engine's own Logout.

QuickFIX C++ sends a TestRequest after 1.2 x HeartBtInt of silence and, at 2.4 x, only closes the
connection. An exchange says why it gives up: when nothing arrives within ``grace`` x HeartBtInt of
the TestRequest (default 0.8, so at 2.0 x, before the engine's own timeout; shorter at a HeartBtInt
below 4 s, see ``SilenceTimers.grace_s``), the watchdog calls
``Session.logout(text)``; the engine sends the Logout (35=5, 58=text) on its next tick and ends the
session after its LogoutTimeout (or its heartbeat timeout, whichever comes first).

``Session.logout`` also disables an acceptor session (it would refuse the CompID's next Logon), so
the watchdog enables it again with ``Session.logon`` once the engine has ended it: at once in
onLogout, and again from its own thread, which covers a logout() that raced the session's end.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import quickfix as fix

log = logging.getLogger(__name__)

DEFAULT_GRACE = 0.8
ENGINE_TICK_S = 1.5  # QuickFIX's timer tick (1 s) and scheduling slack on a busy machine


@dataclass(frozen=True, slots=True)
class Due:
    """A session whose TestRequest went unanswered."""

    session: str
    test_req_id: str

    @property
    def text(self) -> str:
        return f"no answer to TestRequest {self.test_req_id}"


class SilenceTimers:
    """Which TestRequests are waiting for an answer, and until when (pure: time comes in)."""

    def __init__(self, grace: float = DEFAULT_GRACE) -> None:
        if grace <= 0:
            raise ValueError(f"grace must be positive, not {grace}")
        self.grace = grace
        self._heartbeats: dict[str, int] = {}
        # session -> (deadline, TestReqID); mutated in place only, so readers may hold on to it
        self.waiting: dict[str, tuple[float, str]] = {}

    def __len__(self) -> int:
        return len(self.waiting)

    def logon(self, session: str, heartbeat_s: int) -> None:
        self._heartbeats[session] = heartbeat_s
        self.waiting.pop(session, None)

    def sent_test_request(self, session: str, test_req_id: str, now: float) -> None:
        hb = self._heartbeats.get(session, 0)
        if hb > 0:
            # A second TestRequest keeps the first deadline: the silence began with the first.
            self.waiting.setdefault(session, (now + self.grace_s(hb), test_req_id))

    def grace_s(self, hb: int) -> float:
        """Seconds from the TestRequest to the Logout for HeartBtInt ``hb``."""
        # The engine checks its timers about once a second, so its TestRequest may leave up to a
        # tick after 1.2 x HeartBtInt, and that lateness comes off the 1.2 x HeartBtInt left before
        # its own timeout: keep the Logout a tick and a little ahead of it (matters at HeartBtInt < 4).
        return max(0.1 * hb, min(self.grace * hb, 1.2 * hb - ENGINE_TICK_S))

    def heard(self, session: str) -> None:
        self.waiting.pop(session, None)

    def ended(self, session: str) -> None:
        self.waiting.pop(session, None)
        self._heartbeats.pop(session, None)

    def next_deadline(self) -> float | None:
        return min((d for d, _ in self.waiting.values()), default=None)

    def due(self, now: float) -> list[Due]:
        """Remove and return the sessions whose deadline has passed."""
        out = [Due(s, t) for s, (d, t) in self.waiting.items() if d <= now]
        for item in out:
            del self.waiting[item.session]
        return out


class SilenceWatchdog:
    """One thread for every session of an acceptor; the callbacks only record (never block)."""

    def __init__(self, grace: float = DEFAULT_GRACE, tick_s: float = 0.5,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.timers = SilenceTimers(grace)
        # Truthy while some TestRequest is unanswered: read on every application message, so a
        # plain dict (~30 ns), not a property.
        self.waiting = self.timers.waiting
        self.tick_s = tick_s
        self.clock = clock
        self.logouts = 0
        self._sids: dict[str, fix.SessionID] = {}
        self._disabled: dict[str, fix.SessionID] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None


    # ------------------------------------------------------------ from QuickFIX callbacks

    def logon(self, session: str, sid: fix.SessionID, heartbeat_s: int) -> None:
        copy = fix.SessionID(sid.getBeginString().getValue(), sid.getSenderCompID().getValue(),
                             sid.getTargetCompID().getValue())
        with self._lock:
            self._sids[session] = copy
            self.timers.logon(session, heartbeat_s)

    def sent_test_request(self, session: str, test_req_id: str) -> None:
        with self._lock:
            self.timers.sent_test_request(session, test_req_id, self.clock())
        self._wake.set()

    def heard(self, session: str) -> None:
        with self._lock:
            self.timers.heard(session)

    def ended(self, session: str) -> None:
        """The engine ended ``session`` (onLogout, on its thread): enable it again if we disabled it."""
        with self._lock:
            self.timers.ended(session)
            sid = self._disabled.get(session)
        if sid is not None:
            # At once: the client may reconnect the moment its socket closes, before our thread
            # runs. Our thread still checks it afterwards, in case its logout() came in between.
            found = fix.Session.lookupSession(sid)
            if found is not None:
                found.logon()
        self._wake.set()

    # ------------------------------------------------------------ the thread

    def start(self) -> SilenceWatchdog:
        self._thread = threading.Thread(target=self._run, name="silence-watchdog", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the thread (before the acceptor stops: its Sessions must outlive every call)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(5.0)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                deadline = self.timers.next_deadline()
            wait = self.tick_s if deadline is None else min(self.tick_s, max(0.0, deadline - self.clock()))
            self._wake.wait(wait)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                with self._lock:
                    due = self.timers.due(self.clock())
                for item in due:
                    self._log_out(item)
                self._enable_ended()
            except Exception:
                log.exception("silence watchdog: one round failed (it keeps watching)")

    def _log_out(self, item: Due) -> None:
        sid = self._sids.get(item.session)
        session = fix.Session.lookupSession(sid) if sid is not None else None
        if session is None or not session.isLoggedOn():
            return
        with self._lock:
            self._disabled[item.session] = sid
        session.logout(item.text)
        self.logouts += 1
        log.info("logging out a silent session: %s", item.text, extra={"session": item.session})

    def _enable_ended(self) -> None:
        with self._lock:
            disabled = list(self._disabled.items())
        for name, sid in disabled:
            session = fix.Session.lookupSession(sid)
            if session is not None and session.isLoggedOn():
                continue
            if session is not None:
                session.logon()  # the CompID may log on again
            with self._lock:
                self._disabled.pop(name, None)
