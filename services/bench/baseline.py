"""``python -m services.bench.baseline --port P``: the engine alone, for a side-by-side ratio.

A QuickFIX acceptor with the gateway's engine settings (FIX 4.4, SenderCompID FIXLAB, data
dictionary validation, the BENCH CompIDs) that answers every NewOrderSingle with an
ExecutionReport New itself: no bus, no matcher. The bench against it shows what the engines, the
kernel and the client cost; the exchange's figures over these show what the Redis hop and the
matcher add.

With ``--fills`` it also answers as the exchange does when orders cross: the bench's orders are one
unit each at one price, so an order meeting a resting one of the other side trades with it (oldest
first), and both get an ExecutionReport Fill (150=F, 39=2), as the exchange sends them. The New and
the Fills are what the exchange's two FIX engines (the client's and the gateway's) carry per order;
this mode measures what those messages alone cost, with no bus and no matcher: the most orders/s
an exchange built on these engines could answer on this machine.
"""

from __future__ import annotations

import argparse
import itertools
import logging
import os
import sys
import threading
from collections import deque

import quickfix as fix

from services.bench.engine import TransactTime, acceptor_settings
from shared import logs
from shared.compids import BENCH_COMP_IDS
from shared.fix.engine_thread import keep_thread_state
from shared.signals import stop_on_signals

log = logging.getLogger(__name__)


def report_template() -> fix.Message:
    msg = fix.Message()
    msg.getHeader().setField(35, "8")
    for tag, value in ((150, "0"), (39, "0"), (14, "0"), (6, "0")):
        msg.setField(tag, value)
    return msg


class EchoNew(fix.Application):
    """Answers each NewOrderSingle with ExecutionReport New (150=0, 39=0, all open); with ``fills``,
    crossing orders (one price, one unit each) then get a Fill each."""

    def __init__(self, ignore_every: int = 0, fills: bool = False) -> None:
        super().__init__()
        self.ignore_every = ignore_every
        self.fills = fills
        self.fills_sent = 0
        # Resting orders by side: (session, OrderID, ClOrdID, Symbol, Side, OrderQty, Price).
        self._resting: dict[str, deque[tuple[fix.SessionID, str, str, str, str, str, str]]] = {
            "1": deque(), "2": deque()}
        self._sessions: dict[str, fix.SessionID] = {}
        self._template = report_template()
        self._ids = itertools.count(1)
        self._clock = TransactTime()
        self.orders = 0
        self.errors = 0

    def onCreate(self, sessionID: fix.SessionID) -> None:
        pass

    def onLogon(self, sessionID: fix.SessionID) -> None:
        keep_thread_state()

    def onLogout(self, sessionID: fix.SessionID) -> None:
        pass

    def toAdmin(self, message: fix.Message, sessionID: fix.SessionID) -> None:
        pass

    def fromAdmin(self, message: fix.Message, sessionID: fix.SessionID) -> None:
        pass

    def toApp(self, message: fix.Message, sessionID: fix.SessionID) -> None:
        pass

    def fromApp(self, message: fix.Message, sessionID: fix.SessionID) -> None:
        keep_thread_state()
        try:
            if message.getHeader().getField(35) != "D":
                raise fix.UnsupportedMessageType()
            count = next(self._ids)
            if self.ignore_every and count % self.ignore_every == 0:
                self.orders += 1
                return  # a test of the bench's lost-order accounting: this one is never answered
            n = str(count)
            qty = message.getField(38)
            er = fix.Message(self._template)
            er.setField(37, n)
            er.setField(17, n)
            clordid, symbol = message.getField(11), message.getField(55)
            side, price = message.getField(54), message.getField(44)
            er.setField(11, clordid)
            er.setField(55, symbol)
            er.setField(54, side)
            er.setField(38, qty)
            er.setField(44, price)
            er.setField(151, qty)
            er.setField(60, self._clock())
            fix.Session.sendToTarget(er, sessionID)
            self.orders += 1
            if self.fills:
                # The callback's SessionID belongs to the engine: the resting order keeps its own copy.
                key = sessionID.toString()
                sid = self._sessions.get(key)
                if sid is None:
                    sid = self._sessions[key] = fix.SessionID(
                        sessionID.getBeginString().getValue(), sessionID.getSenderCompID().getValue(),
                        sessionID.getTargetCompID().getValue())
                self._cross((sid, n, clordid, symbol, side, qty, price))
        except (fix.UnsupportedMessageType, fix.FieldNotFound):
            raise  # QuickFIX's own: the engine answers with a reject
        except Exception:
            self.errors += 1
            log.exception("fromApp")


    def _cross(self, order: tuple[fix.SessionID, str, str, str, str, str, str]) -> None:
        """Trade ``order`` with the oldest resting order of the other side, or rest it."""
        other = self._resting["2" if order[4] == "1" else "1"]
        if not other:
            self._resting[order[4]].append(order)
            return
        resting = other.popleft()
        match = str(next(self._ids))
        now = self._clock()
        px = resting[6]
        for sid, order_id, clordid, symbol, side, qty, price in (order, resting):
            # Built as the gateway builds its reports: the text, parsed once (Session.send fills in
            # the header).
            fix.Session.sendToTarget(fix.Message(
                f"8=FIX.4.4\x019=0\x0135=8\x0137={order_id}\x0117={order_id}-{match}\x0111={clordid}"
                f"\x01150=F\x0139=2\x0155={symbol}\x0154={side}\x0138={qty}\x0140=2\x0144={price}"
                f"\x0131={px}\x0132={qty}\x01151=0\x0114={qty}\x016={px}\x0160={now}\x01527={match}"
                "\x0110=000\x01", False), sid)
            self.fills_sent += 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m services.bench.baseline", description=__doc__)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--ignore-every", type=int, default=0, metavar="N",
                   help="leave every Nth order unanswered (tests the bench's lost-order accounting)")
    p.add_argument("--fills", action="store_true",
                   help="also send a Fill to both orders when they cross, as the exchange does")
    args = p.parse_args(argv)
    logs.setup("baseline")
    if not 0 < args.port < 65536:
        print(f"baseline: --port {args.port} is not a TCP port", file=sys.stderr)
        return 2
    if args.ignore_every < 0:
        print(f"baseline: --ignore-every {args.ignore_every} must not be negative", file=sys.stderr)
        return 2
    app = EchoNew(args.ignore_every, args.fills)
    settings = acceptor_settings(args.port, BENCH_COMP_IDS, args.host)
    acceptor = fix.SocketAcceptor(app, fix.MemoryStoreFactory(), settings)
    stop = threading.Event()
    stop_on_signals(stop)  # no lock taken in a handler: its main thread waits on this very Event
    try:
        acceptor.start()
    except fix.ConfigError as exc:
        print(f"baseline: {exc}", file=sys.stderr)
        return 2
    except fix.RuntimeError as exc:
        print(f"baseline: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 1
    print(f"baseline ready on {args.host}:{args.port}", flush=True)
    while not stop.wait(0.5):
        pass
    log.info("answered %d orders, sent %d fills, %d errors", app.orders, app.fills_sent, app.errors)
    # No acceptor.stop(): with the 224 BENCH sessions configured, quickfix 1.16.0's
    # SocketServer::close races the acceptor thread and segfaults about half the time (gdb:
    # Acceptor.cpp:230). The baseline keeps nothing, so ending the process is the clean stop.
    logging.shutdown()
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    raise SystemExit(main())
