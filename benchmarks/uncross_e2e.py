"""The uncross end to end: a call of ``n`` orders on a stack started as ``make run`` starts it, then
the SetPhase that ends it, timed until the last report of the auction reaches its FIX client.

One strict QuickFIX client (BENCH001, stock FIX44.xml) sends the call's orders (``uncross.call_book``'s:
prices 1% either side of the reference, one in ten At the Opening); the matcher's open-order limit is
raised for the run (FIXLAB_MATCHER_MAX_OPEN_ORDERS), since one session holds them all: its orders then
reach the matcher in the order sent, so the reports the auction gives (fills, the At the Opening
cancels) are known in advance, by replaying the same orders in an ``Engine`` here. The clock starts
when the SetPhase is written to the orders stream (as ``fixlab admin phase`` writes it) and stops at
the last of those reports in the client's ``fromApp``.
"""

from __future__ import annotations

import dataclasses
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import quickfix as fix

from benchmarks.chaos.client import session_settings
from benchmarks.chaos.stack import Runner, wait_for
from services.matcher.engine import Engine, Limits
from shared import bus, streams
from shared.config import Instrument, parse_instruments
from shared.phases import set_phase
from shared.redis_server import free_port
from shared.schema import (
    AT_OPEN,
    BUY,
    PHASE_CONTINUOUS,
    PHASE_PRE_OPEN,
    Cancelled,
    Filled,
    NewOrder,
    SetPhase,
    from_wire,
)

COMP_ID = "BENCH001"
SOH = "\x01"


class Reports(fix.Application):
    """Counts the ExecutionReports of the run; after ``t0``, the arrival of each fill or cancel."""

    def __init__(self) -> None:
        super().__init__()
        self.lock = threading.Lock()
        self.logged_on = threading.Event()
        self.new = self.rejected = 0
        self.t0: float | None = None
        self.after: list[float] = []
        self.errors: list[str] = []

    def onCreate(self, sid: fix.SessionID) -> None: ...
    def onLogout(self, sid: fix.SessionID) -> None: ...
    def toAdmin(self, msg: fix.Message, sid: fix.SessionID) -> None: ...
    def fromAdmin(self, msg: fix.Message, sid: fix.SessionID) -> None: ...
    def toApp(self, msg: fix.Message, sid: fix.SessionID) -> None: ...

    def onLogon(self, sid: fix.SessionID) -> None:
        self.logged_on.set()

    def fromApp(self, msg: fix.Message, sid: fix.SessionID) -> None:
        try:
            if msg.getHeader().getField(35) != "8":
                return
            exec_type = msg.getField(150)
            now = time.perf_counter()
            with self.lock:
                if exec_type == "0":
                    self.new += 1
                elif exec_type == "8":
                    self.rejected += 1
                elif exec_type in ("F", "4") and self.t0 is not None:
                    self.after.append(now)
        except Exception as exc:  # an exception escaping a callback ends the process
            self.errors.append(repr(exc))


def expected_reports(orders: list[NewOrder], instrument: Instrument, n: int) -> int:
    """The fills and cancels the auction gives these orders, in this order (replayed here)."""
    engine = Engine([instrument], limits=Limits(max_open_per_session=n + 100), book_updates=True)
    engine.apply(SetPhase(instrument.symbol, PHASE_PRE_OPEN, "bench", 1))
    for i in range(0, len(orders), 500):
        engine.apply_batch(orders[i:i + 500])
    result = engine.apply_batch([SetPhase(instrument.symbol, PHASE_CONTINUOUS, "open", 2)])
    return sum(1 for dest, w in result.events if dest is not None and w[0] in (Filled.CODE, Cancelled.CODE))


def order_message(o: NewOrder, instrument: Instrument) -> fix.Message:
    msg = fix.Message()
    msg.getHeader().setField(fix.MsgType("D"))
    for tag, value in ((11, o.clordid), (55, o.symbol), (54, str(o.side)), (38, str(o.qty)), (40, "2"),
                       (44, str(instrument.to_price(o.price))), (59, str(o.tif)),
                       (60, time.strftime("%Y%m%d-%H:%M:%S", time.gmtime()))):
        msg.setField(tag, value)
    return msg


def time_e2e(n: int, call: list[Any], timeout_s: float = 120.0) -> dict[str, Any]:
    """Start a stack, fill its call with ``call``'s orders from one session, end the call, time it."""
    # One session sends them all (the call book's own session names spread them over 500).
    orders = [dataclasses.replace(o, session=COMP_ID) for o in map(from_wire, call[1:])
              if isinstance(o, NewOrder)]
    with tempfile.TemporaryDirectory(prefix="fixlab-uncross-") as tmp:
        fix_port, web_port = free_port(), free_port()
        runner = Runner(Path(tmp) / "run", fix_port, web_port, {
            "FIXLAB_BOTS": "0", "FIXLAB_MATCHER_MAX_OPEN_ORDERS": str(n + 100)})
        app = Reports()
        initiator = None
        try:
            started_s = runner.start()
            instruments = parse_instruments(runner.env)
            acorn = next(i for i in instruments if i.symbol == "ACORN.LAB")
            expected = expected_reports(orders, acorn, n)
            initiator = fix.SocketInitiator(app, fix.MemoryStoreFactory(),
                                            session_settings("127.0.0.1", fix_port, [COMP_ID],
                                                             keep_sequences=False, store_dir=Path(tmp)))
            initiator.start()
            if not app.logged_on.wait(30):
                raise TimeoutError(f"{COMP_ID} did not log on")
            r = runner.redis()
            if not set_phase(r, instruments, "ACORN.LAB", PHASE_PRE_OPEN, "bench: opening call", 10):
                raise TimeoutError("no PhaseChanged to PRE_OPEN")
            sid = fix.SessionID("FIX.4.4", COMP_ID, "FIXLAB")
            sent_at = time.perf_counter()
            for o in orders:
                fix.Session.sendToTarget(order_message(o, acorn), sid)
            wait_for(lambda: app.new + app.rejected >= len(orders), timeout_s, "the call's orders acked")
            call_s = time.perf_counter() - sent_at
            if app.rejected:
                raise RuntimeError(f"{app.rejected} orders of the call were rejected")
            stream = streams.orders_stream(acorn.shard)
            with app.lock:
                app.t0 = t0 = time.perf_counter()
            the_open = SetPhase("ACORN.LAB", PHASE_CONTINUOUS, "bench: the open", time.time_ns())
            bus.publish(r, stream, [the_open], 1_000_000)
            wait_for(lambda: len(app.after) >= expected, timeout_s, f"the auction's {expected} reports")
            time.sleep(0.5)  # a report beyond the expected ones would show up here (counted, not waited on)
            with app.lock:
                arrivals = sorted(app.after)
            return {"orders": len(orders), "at_the_open": sum(1 for o in orders if o.tif == AT_OPEN),
                    "buys": sum(1 for o in orders if o.side == BUY), "stack_start_s": round(started_s, 1),
                    "call_orders_acked_s": round(call_s, 2), "expected_reports": expected,
                    "reports": len(arrivals), "first_report_ms": round((arrivals[0] - t0) * 1000, 1),
                    "last_report_ms": round((arrivals[expected - 1] - t0) * 1000, 1),
                    "target_ms": 1000.0, "under_target": (arrivals[expected - 1] - t0) < 1.0,
                    "client_errors": app.errors}
        finally:
            if initiator is not None:
                initiator.stop()
            runner.stop()
