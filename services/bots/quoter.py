"""The bots' QuickFIX application: keep a ladder of limit orders around each reference price.

Each session places the levels of services.bots.ladder, and places a level again once it has filled
or been cancelled. QuickFIX callbacks only record what happened (they must never raise); one worker
thread decides and sends.
"""

from __future__ import annotations

import logging
import queue
import threading
import time

import quickfix as fix

from services.bots.config import BotSettings
from services.bots.ladder import Quote, ladder, levels_per_side, missing
from shared.fix.codec import field_values
from shared.fix.engine_thread import keep_thread_state

log = logging.getLogger("bots")


def fields_of(msg: fix.Message) -> dict[int, str]:
    """Tags of a QuickFIX message as strings (first value wins), via one toString()."""
    return field_values(msg.toString())


class Bot:
    """One session's book-keeping: its resting orders by ClOrdID."""

    def __init__(self, index: int, comp_id: str) -> None:
        self.index = index
        self.comp_id = comp_id
        self.sid: fix.SessionID | None = None
        self.logged_on = False
        self.resting: dict[str, tuple[str, int, int]] = {}  # clordid -> (symbol, side, price ticks)
        self.in_flight: dict[str, tuple[str, int, int]] = {}  # sent, no answer yet
        self.next_at = 0.0

    def levels(self) -> set[tuple[str, int, int]]:
        return set(self.resting.values()) | set(self.in_flight.values())


class Bots(fix.Application):
    def __init__(self, s: BotSettings) -> None:
        super().__init__()
        self.s = s
        self.bots = {comp: Bot(i, comp) for i, comp in enumerate(s.comp_ids)}
        self.events: queue.Queue[tuple[str, str, dict[int, str]]] = queue.Queue(maxsize=100_000)
        self.levels = levels_per_side(len(s.common.instruments), s.max_open, s.levels)
        self.run_id = str(time.time_ns())[-10:]
        self.seq = 0
        self.counters = {"orders_sent": 0, "fills": 0, "rejects": 0}

    # QuickFIX callbacks: record and hand over; never raise.
    def _put(self, kind: str, sid: fix.SessionID, fields: dict[int, str]) -> None:
        try:
            self.events.put_nowait((kind, sid.getSenderCompID().getValue(), fields))
        except queue.Full:
            log.error("bot event queue full: dropping %s", kind)

    def onCreate(self, sid: fix.SessionID) -> None:
        try:
            self.bots[sid.getSenderCompID().getValue()].sid = sid
        except Exception:
            log.exception("onCreate failed")

    def onLogon(self, sid: fix.SessionID) -> None:
        keep_thread_state()  # the initiator lives as long as the process (shared.fix.engine_thread)
        try:
            self._put("logon", sid, {})
        except Exception:
            log.exception("onLogon failed")

    def onLogout(self, sid: fix.SessionID) -> None:
        try:
            self._put("logout", sid, {})
        except Exception:
            log.exception("onLogout failed")

    def toAdmin(self, msg: fix.Message, sid: fix.SessionID) -> None:
        pass

    def fromAdmin(self, msg: fix.Message, sid: fix.SessionID) -> None:
        pass

    def toApp(self, msg: fix.Message, sid: fix.SessionID) -> None:
        pass

    def fromApp(self, msg: fix.Message, sid: fix.SessionID) -> None:
        keep_thread_state()
        try:
            self._put("app", sid, fields_of(msg))
        except Exception:
            log.exception("fromApp failed")

    # The worker thread.
    def apply(self, kind: str, comp: str, f: dict[int, str]) -> None:
        bot = self.bots.get(comp)
        if bot is None:
            return
        if kind == "logon":
            bot.logged_on = True
            bot.resting.clear()  # ResetOnLogon: the exchange cancelled the last session's orders
            bot.in_flight.clear()
            log.info("%s logged on; quoting %d levels per side", comp, self.levels)
        elif kind == "logout":
            bot.logged_on = False
            bot.resting.clear()
            bot.in_flight.clear()
        elif f.get(35) == "8":
            clordid, exec_type = f.get(11, ""), f.get(150, "")
            level = bot.in_flight.pop(clordid, None) or bot.resting.get(clordid)
            leaves = f.get(151, "0")
            if exec_type == "8":
                self.counters["rejects"] += 1
                log.warning("%s order %s rejected: %s", comp, clordid, f.get(58, ""))
                bot.resting.pop(clordid, None)
            elif exec_type in ("4", "C") or (exec_type == "F" and leaves in ("0", "")):
                bot.resting.pop(clordid, None)
                self.counters["fills"] += exec_type == "F"
            elif level is not None:
                self.counters["fills"] += exec_type == "F"
                bot.resting[clordid] = level

    def quote(self, bot: Bot, now: float) -> None:
        if not bot.logged_on or bot.sid is None or now < bot.next_at:
            return
        plan = ladder(self.s.common.instruments, bot.index, len(self.bots), self.levels)
        todo = missing(plan, bot.levels())
        if not todo or len(bot.resting) + len(bot.in_flight) >= self.s.max_open:
            return
        self.send(bot, todo[0])
        bot.next_at = now + 1.0 / self.s.orders_per_s

    def send(self, bot: Bot, q: Quote) -> None:
        inst = self.s.common.instrument(q.symbol)
        assert inst is not None
        self.seq += 1
        clordid = f"{bot.comp_id}-{self.run_id}-{self.seq}"
        msg = fix.Message()
        msg.getHeader().setField(35, "D")
        now = time.strftime("%Y%m%d-%H:%M:%S", time.gmtime())
        for tag, value in ((11, clordid), (55, q.symbol), (54, str(q.side)), (60, now),
                           (38, str(q.qty)), (40, "2"), (44, str(inst.to_price(q.price_ticks))), (59, "0")):
            msg.setField(tag, value)
        bot.in_flight[clordid] = (q.symbol, q.side, q.price_ticks)
        if fix.Session.sendToTarget(msg, bot.sid):
            self.counters["orders_sent"] += 1
        else:
            bot.in_flight.pop(clordid, None)

    def work(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                kind, comp, f = self.events.get(timeout=0.05)
                self.apply(kind, comp, f)
                continue
            except queue.Empty:
                pass
            now = time.monotonic()
            for bot in self.bots.values():
                self.quote(bot, now)

    def health(self) -> dict[str, int]:
        return {**self.counters, "sessions": len(self.bots),
                "logged_on": sum(b.logged_on for b in self.bots.values()),
                "resting": sum(len(b.resting) for b in self.bots.values())}
