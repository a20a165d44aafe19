"""``python -m services.bench.baseline --port P``: the engine alone, for a side-by-side ratio.

A QuickFIX acceptor with the gateway's engine settings (FIX 4.4, SenderCompID FIXLAB, data
dictionary validation, the BENCH CompIDs) that answers every NewOrderSingle with an
ExecutionReport New itself: no bus, no matcher. The bench against it shows what the engines, the
kernel and the client cost; the exchange's figures over these show what the Redis hop and the
matcher add.
"""

from __future__ import annotations

import argparse
import itertools
import logging
import os
import sys
import threading

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
    """Answers each NewOrderSingle with ExecutionReport New (150=0, 39=0, all open)."""

    def __init__(self, ignore_every: int = 0) -> None:
        super().__init__()
        self.ignore_every = ignore_every
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
            er.setField(11, message.getField(11))
            er.setField(55, message.getField(55))
            er.setField(54, message.getField(54))
            er.setField(38, qty)
            er.setField(44, message.getField(44))
            er.setField(151, qty)
            er.setField(60, self._clock())
            fix.Session.sendToTarget(er, sessionID)
            self.orders += 1
        except (fix.UnsupportedMessageType, fix.FieldNotFound):
            raise  # QuickFIX's own: the engine answers with a reject
        except Exception:
            self.errors += 1
            log.exception("fromApp")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m services.bench.baseline", description=__doc__)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--ignore-every", type=int, default=0, metavar="N",
                   help="leave every Nth order unanswered (tests the bench's lost-order accounting)")
    args = p.parse_args(argv)
    logs.setup("baseline")
    if not 0 < args.port < 65536:
        print(f"baseline: --port {args.port} is not a TCP port", file=sys.stderr)
        return 2
    if args.ignore_every < 0:
        print(f"baseline: --ignore-every {args.ignore_every} must not be negative", file=sys.stderr)
        return 2
    app = EchoNew(args.ignore_every)
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
    log.info("answered %d orders, %d errors", app.orders, app.errors)
    # No acceptor.stop(): with the 256 BENCH sessions configured, quickfix 1.16.0's
    # SocketServer::close races the acceptor thread and segfaults about half the time (gdb:
    # Acceptor.cpp:230). The baseline keeps nothing, so ending the process is the clean stop.
    logging.shutdown()
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    raise SystemExit(main())
