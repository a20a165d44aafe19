"""The load under the faults: QuickFIX initiator sessions sending windows of orders, as the bench does,
that also keep every ExecutionReport (the ledger) and carry on by themselves after a reconnect.

The measuring bench (services/bench) cannot do this: its windows wait for answers that a dead
acceptor will never send, and its sessions reset their numbers. These sessions are ordinary
initiators (ReconnectInterval=1), with a message store on disk and their sequence numbers kept across
reconnects (``keep_sequences``), as a real client is configured, or reset on every Logon like the
bench and the bots. Each validates what it receives with the stock FIX44.xml, strictly: a session
Reject it sends is counted and is a bug of ours.

Orders, one unit each, on one symbol: most alternate buy and sell at the mid and trade with each
other; every ``rest_every``-th (up to ``rest_max`` per session, under the 20 open orders a session
may have) is a GTC buy below or sell above the
mid that stays in the book, so the books hold acknowledged orders across the fault.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import quickfix as fix

from benchmarks.chaos.ledger import Ledger
from services.bench.engine import TransactTime, order_template
from shared.compids import BEGIN_STRING, EXCHANGE_COMP_ID
from shared.fix.dictionary import installed_dictionary

log = logging.getLogger(__name__)

SOH = "\x01"


def fields_of(message: fix.Message) -> dict[int, str]:
    out: dict[int, str] = {}
    for part in message.toString().split(SOH):
        tag, sep, value = part.partition("=")
        if sep and tag.isdigit():
            out.setdefault(int(tag), value)
    return out


class Driver:
    """One session's orders: ClOrdID = tag + "-" + number; at most ``window`` unanswered."""

    def __init__(self, comp_id: str, tag: str, client: ChaosClient) -> None:
        self.comp_id = comp_id
        self.tag = tag
        self.client = client
        self.lock = threading.Lock()
        self.session: fix.Session | None = None
        self.logged_on = threading.Event()
        self.sending = False
        self.next_number = 0
        self.rests = 0
        self.mids = 0  # orders at the mid so far: they alternate buy and sell, so the book stays small
        self.outstanding: set[str] = set()
        self.logons = 0
        self.disconnects = 0
        self.send_failures = 0
        self.mark: int | None = None  # the first order number sent after a fault
        self.recovered_at: float | None = None  # when an order from ``mark`` on was acknowledged

    def on_logon(self, session: fix.Session) -> None:
        with self.lock:
            self.session = session
            self.logons += 1
            # Orders sent before the connection dropped: their fate is settled at the end (ledger
            # against the book); the window starts empty again.
            self.outstanding.clear()
        self.logged_on.set()
        self.pump()

    def on_logout(self) -> None:
        self.logged_on.clear()
        self.disconnects += 1

    def pump(self) -> None:
        c = self.client
        while True:
            with self.lock:
                session = self.session
                if (not self.sending or session is None or not self.logged_on.is_set()
                        or len(self.outstanding) >= c.window):
                    return
                n = self.next_number
                self.next_number = n + 1
                clordid = f"{self.tag}-{n}"
                self.outstanding.add(clordid)
                rest = n % c.rest_every == c.rest_every - 1 and self.rests < c.rest_max
                if rest:
                    self.rests += 1
                    buy = self.rests % 2 == 0
                else:
                    self.mids += 1
                    buy = self.mids % 2 == 0
            msg = fix.Message(c.template)
            msg.setField(11, clordid)
            if rest:  # below or above the mid: it stays in the book
                msg.setField(44, c.low if buy else c.high)
                msg.setField(59, "1")  # GTC
            msg.setField(54, "1" if buy else "2")
            msg.setField(60, c.clock())
            c.ledger.sent(clordid, 1)
            if not session.send(msg):
                # Not logged on (any more): it went nowhere, or into the store for a resend.
                with self.lock:
                    self.send_failures += 1
                    self.outstanding.discard(clordid)
                return

    def on_answer(self, clordid: str, new: bool) -> None:
        with self.lock:
            if new and self.mark is not None and self.recovered_at is None:
                number = clordid.rpartition("-")[2]
                if number.isdigit() and int(number) >= self.mark:
                    self.recovered_at = time.monotonic()
            if clordid not in self.outstanding:
                return
            self.outstanding.discard(clordid)
        self.pump()


class ChaosApp(fix.Application):
    def __init__(self, client: ChaosClient) -> None:
        super().__init__()
        self.client = client
        self.rejects_sent = 0  # session Rejects our strict clients sent: each is a bug of the exchange
        self.errors = 0

    def _driver(self, sid: fix.SessionID) -> Driver | None:
        return self.client.drivers.get(sid.getSenderCompID().getValue())

    def onCreate(self, sessionID: fix.SessionID) -> None:
        pass

    def onLogon(self, sessionID: fix.SessionID) -> None:
        try:
            d = self._driver(sessionID)
            if d is not None:
                d.on_logon(self.client.session(sessionID.getSenderCompID().getValue()))
        except Exception:
            self.errors += 1
            log.exception("onLogon")

    def onLogout(self, sessionID: fix.SessionID) -> None:
        try:
            d = self._driver(sessionID)
            if d is not None:
                d.on_logout()
        except Exception:
            self.errors += 1
            log.exception("onLogout")

    def toAdmin(self, message: fix.Message, sessionID: fix.SessionID) -> None:
        try:
            if message.getHeader().getField(35) == "3":
                self.rejects_sent += 1
                log.warning("we rejected a message of the exchange: %s", message.toString().replace(SOH, "|"))
        except Exception:
            self.errors += 1

    def fromAdmin(self, message: fix.Message, sessionID: fix.SessionID) -> None:
        pass

    def toApp(self, message: fix.Message, sessionID: fix.SessionID) -> None:
        pass

    def fromApp(self, message: fix.Message, sessionID: fix.SessionID) -> None:
        try:
            f = fields_of(message)
            if f.get(35) != "8":
                self.client.other_messages += 1
                return
            self.client.ledger.report(f)
            if f.get(150) in ("0", "8"):
                d = self.client.by_tag.get(f.get(11, "").rpartition("-")[0])
                if d is not None:
                    d.on_answer(f[11], f[150] == "0")
        except Exception:
            self.errors += 1
            log.exception("fromApp")


def session_settings(host: str, port: int, comp_ids: Sequence[str], *, keep_sequences: bool,
                     store_dir: Path, heartbeat_s: int = 5) -> fix.SessionSettings:
    settings = fix.SessionSettings()
    d = fix.Dictionary()
    reset = "N" if keep_sequences else "Y"
    for key, value in (
        ("ConnectionType", "initiator"), ("BeginString", BEGIN_STRING),
        ("StartTime", "00:00:00"), ("EndTime", "00:00:00"), ("HeartBtInt", str(heartbeat_s)),
        ("ReconnectInterval", "1"), ("UseDataDictionary", "Y"),
        ("DataDictionary", str(installed_dictionary())),  # the stock FIX44.xml, strict
        ("ResetOnLogon", reset), ("ResetOnLogout", reset), ("ResetOnDisconnect", reset),
        ("SocketNodelay", "Y"), ("SocketConnectHost", host), ("SocketConnectPort", str(port)),
        ("PersistMessages", "Y"), ("FileStorePath", str(store_dir)),
    ):
        d.setString(key, value)
    settings.set(d)
    for comp_id in comp_ids:
        settings.set(fix.SessionID(BEGIN_STRING, comp_id, EXCHANGE_COMP_ID), fix.Dictionary())
    return settings


class ChaosClient:
    """Log the sessions on, send while asked to, keep every report in ``ledger``."""

    def __init__(self, host: str, port: int, comp_ids: Sequence[str], *, run_tag: str, window: int,
                 store_dir: Path, keep_sequences: bool = True, symbol: str = "ACORN.LAB",
                 mid: str = "100.00", low: str = "99.00", high: str = "101.00", rest_every: int = 50,
                 rest_max: int = 8) -> None:
        self.window = window
        self.low, self.high = low, high
        self.rest_every, self.rest_max = rest_every, rest_max
        self.template = order_template(symbol, mid)
        self.clock = TransactTime()
        self.ledger = Ledger()
        self.other_messages = 0
        self.drivers = {c: Driver(c, f"{run_tag}{i}", self) for i, c in enumerate(comp_ids)}
        self.by_tag = {d.tag: d for d in self.drivers.values()}
        self.app = ChaosApp(self)
        store_dir.mkdir(parents=True, exist_ok=True)
        self.settings = session_settings(host, port, comp_ids, keep_sequences=keep_sequences,
                                         store_dir=store_dir)
        store = fix.FileStoreFactory(self.settings) if keep_sequences else fix.MemoryStoreFactory()
        self.initiator: fix.SocketInitiator | None = fix.SocketInitiator(self.app, store, self.settings)

    def start(self, timeout_s: float = 60.0) -> None:
        if self.initiator is None:
            raise RuntimeError("a stopped ChaosClient does not start again")
        self.initiator.start()
        deadline = time.monotonic() + timeout_s
        for d in self.drivers.values():
            if not d.logged_on.wait(max(0.0, deadline - time.monotonic())):
                raise TimeoutError(f"{d.comp_id} not logged on within {timeout_s:.0f}s")

    def session(self, comp_id: str) -> fix.Session:
        """``comp_id``'s Session in this client's own initiator. Not QuickFIX's process-wide registry
        (``Session.lookupSession``, ``sendToTarget``): a session of the same SessionID in an earlier
        initiator that is not yet destroyed stays registered there, and would get the messages."""
        session = None
        if self.initiator is not None:
            session = self.initiator.getSession(fix.SessionID(BEGIN_STRING, comp_id, EXCHANGE_COMP_ID))
        if session is None:
            raise RuntimeError(f"{comp_id}: no session in this client's initiator (stopped?)")
        return session

    def send_message(self, comp_id: str, msg: fix.Message) -> bool:
        """Send a message built by the caller on ``comp_id``'s session; False when it did not go out."""
        return bool(self.session(comp_id).send(msg))

    def send(self, on: bool) -> None:
        for d in self.drivers.values():
            with d.lock:
                d.sending = on
            if on:
                d.pump()

    def all_logged_on(self) -> bool:
        return all(d.logged_on.is_set() for d in self.drivers.values())

    def reports(self) -> int:
        return sum(v.reports for v in self.ledger.orders.values())

    def logons(self) -> int:
        return sum(d.logons for d in self.drivers.values())

    def disconnects(self) -> int:
        return sum(d.disconnects for d in self.drivers.values())

    def stop(self) -> None:
        """Stop the engine without a Logout (a Logout would end the sessions and cancel their orders
        before anyone read the books); the harness reads the books first. Then drop the initiator
        at once rather than when the collector finds this client (its drivers and app point back at
        it): destroying it deletes its Sessions, which takes them out of QuickFIX's process-wide
        registry, so a later initiator with the same CompIDs is the one registered there."""
        self.send(False)
        if self.initiator is None:
            return
        self.initiator.stop(True)  # joins QuickFIX's thread: no callback runs after it
        for d in self.drivers.values():
            with d.lock:
                d.session = None  # a pointer into the initiator about to be destroyed
        self.initiator = None
