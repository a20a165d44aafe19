"""``python -m services.bench.mdsubs --addr HOST:PORT --sessions 32 --out FILE``: market-data subscribers.

QuickFIX initiator sessions (one ``SocketInitiator``, CompIDs from the END of the BENCH pool, so the
bench, which takes them from the start, never collides) that each log on, subscribe to every
instrument (MarketDataRequest: snapshot + updates, full depth, bids, offers and trades) and count what
comes back, validating it with the exchange's dictionary (a W or X that fails validation draws a
session Reject, counted). ``--ready FILE`` is written once every session holds a W of every
instrument. On SIGTERM or SIGINT it writes what it received as JSON and exits: counts by MsgType, the
X messages per 100 ms bucket (wall clock, so the suite can count those of the bench's measured phase),
the session Rejects it sent.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import quickfix as fix

from services.bench.engine import bench_comp_ids, data_dictionary_path, initiator_settings
from shared.compids import BENCH_COMP_IDS
from shared.config import parse_instruments
from shared.fix.engine_thread import keep_thread_state

BUCKET_NS = 100_000_000


class Subscribers(fix.Application):
    """Every callback guarded: an uncaught Python exception there ends the process (QUICKFIX.md)."""

    def __init__(self, symbols: list[str], sessions: int) -> None:
        super().__init__()
        self.symbols = symbols
        self.sessions = sessions
        self.dd = fix.DataDictionary(str(data_dictionary_path()))
        self.lock = threading.Lock()
        self.counts: Counter[str] = Counter()
        self.x_buckets: Counter[int] = Counter()
        self.x_entries = 0
        self.snapshots: set[tuple[str, str]] = set()
        self.rejects_sent = 0
        self.errors: list[str] = []
        self.all_ready = threading.Event()

    def request(self, comp: str) -> fix.Message:
        body = (f"35=V\x01262={comp}-md\x01263=1\x01264=0\x01265=1\x01267=3\x01269=0\x01269=1\x01269=2\x01"
                f"146={len(self.symbols)}\x01" + "".join(f"55={s}\x01" for s in self.symbols))
        return fix.Message("8=FIX.4.4\x019=0\x01" + body + "10=000\x01", self.dd, False)

    def onCreate(self, sid: fix.SessionID) -> None: ...
    def onLogout(self, sid: fix.SessionID) -> None: ...
    def toApp(self, msg: fix.Message, sid: fix.SessionID) -> None: ...
    def fromAdmin(self, msg: fix.Message, sid: fix.SessionID) -> None: ...

    def onLogon(self, sid: fix.SessionID) -> None:
        keep_thread_state()  # shared.fix.engine_thread
        try:
            fix.Session.sendToTarget(self.request(sid.getSenderCompID().getValue()), sid)
        except Exception as exc:
            self.errors.append(repr(exc))

    def toAdmin(self, msg: fix.Message, sid: fix.SessionID) -> None:
        try:
            if msg.getHeader().getField(35) == "3":
                self.rejects_sent += 1
        except Exception as exc:
            self.errors.append(repr(exc))

    def fromApp(self, msg: fix.Message, sid: fix.SessionID) -> None:
        keep_thread_state()
        try:
            kind = msg.getHeader().getField(35)
            with self.lock:
                self.counts[kind] += 1
                if kind == "X":
                    self.x_buckets[time.time_ns() // BUCKET_NS] += 1
                    self.x_entries += int(msg.getField(268))
                elif kind == "W":
                    self.snapshots.add((sid.getSenderCompID().getValue(), msg.getField(55)))
                    if len(self.snapshots) == self.sessions * len(self.symbols):
                        self.all_ready.set()
        except Exception as exc:
            self.errors.append(repr(exc))

    def report(self) -> dict[str, object]:
        with self.lock:
            return {"sessions": self.sessions, "symbols": self.symbols, "by_type": dict(self.counts),
                    "x_entries": self.x_entries, "snapshots": len(self.snapshots),
                    "session_rejects_sent": self.rejects_sent, "errors": self.errors[:10],
                    "bucket_ns": BUCKET_NS, "x_buckets": sorted(self.x_buckets.items())}


def x_per_second(report: dict[str, object], start_ns: int, end_ns: int) -> float:
    """X messages received per second between two wall-clock instants (whole buckets inside them)."""
    buckets = report.get("x_buckets", [])
    assert isinstance(buckets, list)
    first, last = -(-start_ns // BUCKET_NS), end_ns // BUCKET_NS
    if last <= first:
        return 0.0
    count = sum(n for b, n in buckets if first <= b < last)
    return count / ((last - first) * BUCKET_NS / 1e9)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m services.bench.mdsubs", description=__doc__)
    p.add_argument("--addr", required=True, help="the exchange's FIX acceptor, HOST:PORT")
    p.add_argument("--sessions", type=int, default=32)
    p.add_argument("--first", type=int, help="first BENCH CompID number (default: the last --sessions of "
                                             "the pool)")
    p.add_argument("--out", type=Path, required=True, help="write what was received here (JSON)")
    p.add_argument("--ready", type=Path, help="touch this file once every session holds its snapshots")
    args = p.parse_args(argv)
    host, _, port = args.addr.rpartition(":")
    first = args.first if args.first is not None else len(BENCH_COMP_IDS) - args.sessions + 1
    comps = bench_comp_ids(first, args.sessions)
    symbols = [i.symbol for i in parse_instruments(os.environ)]
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    signal.signal(signal.SIGINT, lambda *_: stopping.set())
    app = Subscribers(symbols, len(comps))
    initiator = fix.SocketInitiator(app, fix.MemoryStoreFactory(), initiator_settings(host, int(port), comps))
    initiator.start()
    try:
        while not stopping.wait(0.1):
            if app.all_ready.is_set() and args.ready is not None and not args.ready.exists():
                args.ready.write_text("ready\n")
    finally:
        args.out.write_text(json.dumps(app.report()) + "\n")
        initiator.stop()
    return 0 if not app.errors else 1


if __name__ == "__main__":
    sys.exit(main())
