"""The bench client: QuickFIX initiator sessions that send windows of orders and time their acks.

One ``SocketInitiator`` holds every session of the process; its callbacks run on one engine thread,
which also refills each session's window (a send from the engine thread goes straight to the socket).
Every callback is guarded: an uncaught Python exception there ends the process (QUICKFIX.md).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import quickfix as fix

from services.bench.engine import TransactTime, initiator_settings, order_template
from services.bench.plan import SessionPlan
from services.bench.window import OrderWindow
from shared import hoptrace
from shared.fix.engine_thread import keep_thread_state

log = logging.getLogger(__name__)

BUY, SELL = "1", "2"


class SessionDriver:
    """One FIX session's orders: numbers from its windows, ClOrdID = tag + "-" + number."""

    def __init__(self, comp_id: str, tag: str, template: fix.Message, clock: TransactTime) -> None:
        self.comp_id = comp_id
        self.tag = tag
        self._prefix = tag + "-"
        self._template = template
        self._clock = clock
        self._lock = threading.Lock()
        self.session: fix.Session | None = None
        self.logged_on = threading.Event()
        self.window: OrderWindow | None = None
        self.phase_done = threading.Event()
        self.last_answer_ns = 0
        self.send_failures = 0

    def begin(self, window: OrderWindow) -> None:
        """Start a phase: fill the window (the answers refill it)."""
        self.phase_done.clear()
        self.window = window
        if window.done:
            self.phase_done.set()
            return
        self.pump()

    def pump(self) -> None:
        window = self.window
        session = self.session
        if window is None or session is None:
            return
        while True:
            with self._lock:
                number = window.take()
            if number is None:
                return
            msg = fix.Message(self._template)
            msg.setField(11, self._prefix + str(number))
            msg.setField(54, BUY if number % 2 == 0 else SELL)  # alternate: they trade, the book stays small
            msg.setField(60, self._clock())
            window.stamp(number, time.perf_counter_ns())
            if hoptrace.ON:
                hoptrace.mark("bench.sent")
            if not session.send(msg):
                # Not logged on any more: the order counts as lost, never silently dropped.
                self.send_failures += 1

    def on_answer(self, number: int, now_ns: int, accepted: bool) -> None:
        window = self.window
        if window is None:
            return
        with self._lock:
            if not window.answer(number, now_ns, accepted):
                return
            self.last_answer_ns = now_ns
            done = window.done
        if done:
            self.phase_done.set()
        else:
            self.pump()


class BenchApplication(fix.Application):
    """Routes ExecutionReports to their session's driver by the ClOrdID's tag."""

    def __init__(self, drivers: dict[str, SessionDriver]) -> None:
        super().__init__()
        self.drivers = drivers
        # The ClOrdID names its session: cheaper than reading the header (a SWIG proxy per call).
        self.by_tag = {d.tag: d for d in drivers.values()}
        self.unknown = 0
        self.logouts = 0
        self.session_rejects = 0
        self.errors = 0

    def onCreate(self, sessionID: fix.SessionID) -> None:
        pass

    def onLogon(self, sessionID: fix.SessionID) -> None:
        keep_thread_state()
        try:
            driver = self.drivers[sessionID.getSenderCompID().getValue()]
            driver.session = fix.Session.lookupSession(sessionID)
            driver.logged_on.set()
        except Exception:
            self.errors += 1
            log.exception("onLogon")

    def onLogout(self, sessionID: fix.SessionID) -> None:
        try:
            self.logouts += 1
            driver = self.drivers.get(sessionID.getSenderCompID().getValue())
            if driver is not None:
                driver.logged_on.clear()
        except Exception:
            self.errors += 1
            log.exception("onLogout")

    def toAdmin(self, message: fix.Message, sessionID: fix.SessionID) -> None:
        pass

    def fromAdmin(self, message: fix.Message, sessionID: fix.SessionID) -> None:
        try:
            msg_type = message.getHeader().getField(35)
            if msg_type == "3":
                self.session_rejects += 1
                log.warning("session-level reject from the exchange: %s",
                            message.toString().replace("\x01", "|"))
        except Exception:
            self.errors += 1

    def toApp(self, message: fix.Message, sessionID: fix.SessionID) -> None:
        pass

    def fromApp(self, message: fix.Message, sessionID: fix.SessionID) -> None:
        now = time.perf_counter_ns()
        keep_thread_state()
        try:
            exec_type = message.getField(150)
            if exec_type == "0" and hoptrace.ON:
                hoptrace.mark("bench.answered")
            if exec_type == "0" or exec_type == "8":
                tag, _, number = message.getField(11).rpartition("-")
                driver = self.by_tag.get(tag)
                if driver is None or not number.isdigit():
                    self.unknown += 1  # not one of this run's orders
                    return
                driver.on_answer(int(number), now, exec_type == "0")
        except fix.FieldNotFound:
            # Not an ExecutionReport (a BusinessMessageReject, say): nothing to time.
            self.session_rejects += 1
        except Exception:
            self.errors += 1
            log.exception("fromApp")


@dataclass(frozen=True, slots=True)
class PhaseOutcome:
    windows: list[OrderWindow]
    start_ns: int  # perf_counter_ns when the phase began
    end_ns: int  # perf_counter_ns of the last answer (or of the give-up)
    stalled: bool


class BenchClient:
    """Log sessions on, run phases of windowed orders, log them out."""

    def __init__(self, sessions: Sequence[SessionPlan], *, run_tag: str, heartbeat_s: int = 30,
                 fix_version: str = "4.4") -> None:
        clock = TransactTime()
        templates = {(s.symbol, s.price): order_template(s.symbol, s.price) for s in sessions}
        self.drivers = {s.comp_id: SessionDriver(s.comp_id, f"{run_tag}{i}", templates[s.symbol, s.price],
                                                 clock)
                        for i, s in enumerate(sessions)}
        self.app = BenchApplication(self.drivers)
        first = sessions[0]
        self.settings = initiator_settings(first.host, first.port, [s.comp_id for s in sessions],
                                           heartbeat_s, {s.comp_id: (s.host, s.port) for s in sessions},
                                           fix_version)
        self.initiator = fix.SocketInitiator(self.app, fix.MemoryStoreFactory(), self.settings)

    def start(self, timeout_s: float) -> None:
        """Connect and log on every session; raise TimeoutError naming those that did not."""
        self.initiator.start()
        deadline = time.monotonic() + timeout_s
        for driver in self.drivers.values():
            if not driver.logged_on.wait(max(0.0, deadline - time.monotonic())):
                missing = [d.comp_id for d in self.drivers.values() if not d.logged_on.is_set()]
                raise TimeoutError(f"not logged on within {timeout_s:.0f}s: {', '.join(missing)}")

    def run_phase(self, quotas: Sequence[int], window: int, base: int, stall_s: float,
                  progress: Callable[[int], None] | None = None) -> PhaseOutcome:
        """Send ``quotas[i]`` orders on session i, at most ``window`` unanswered each; wait until all
        are answered or no answer arrived for ``stall_s`` seconds (the rest are lost)."""
        drivers = list(self.drivers.values())
        windows = [OrderWindow(q, window, base) for q in quotas]
        start = time.perf_counter_ns()
        for driver, w in zip(drivers, windows, strict=True):
            driver.last_answer_ns = start
            driver.begin(w)
        stalled = False
        last_seen, last_change = -1, time.monotonic()
        while not all(d.phase_done.is_set() for d in drivers):
            time.sleep(0.05)  # the engine thread does the work; this only watches
            answered = sum(w.answered for w in windows)
            if progress is not None:
                progress(answered)
            if answered != last_seen:
                last_seen, last_change = answered, time.monotonic()
            elif time.monotonic() - last_change > stall_s:
                stalled = True
                break
        end = max(d.last_answer_ns for d in drivers)
        if progress is not None:
            progress(sum(w.answered for w in windows))
        return PhaseOutcome(windows, start, end, stalled)

    def stop(self, timeout_s: float = 5.0) -> None:
        """Log every session out, then stop the engine."""
        # Initiator.stop() alone polls once a second for the logouts: ask for them ourselves and
        # wait on the Logout callbacks instead.
        for driver in self.drivers.values():
            if driver.session is not None and driver.logged_on.is_set():
                driver.session.logout("bench done")
        deadline = time.monotonic() + timeout_s
        while any(d.logged_on.is_set() for d in self.drivers.values()) and time.monotonic() < deadline:
            time.sleep(0.01)
        self.initiator.stop(True)
