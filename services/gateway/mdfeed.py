"""The market-data thread: the market streams into the mirrors, conflated updates out to subscribers.

The core (``marketdata.MarketData``) is pure; this adapter feeds it and sends what it returns. It
sits idle until the first MarketDataRequest: a gateway nobody asks for market data never reads the
market streams (one per matcher shard, ``shard_market_stream``). Then, once: note each market
stream's last id, ask every shard for a BookImage of each of its books (``ImageRequest`` on its
orders stream, behind the orders already there), and read the streams with plain XREAD (no group:
every gateway reads everything; ``shared.bus.read_streams``) from the noted ids, so each mirror
starts at its image and applies every BookUpdate after it (a book lives on one shard: its stream
keeps its order). Every FIXLAB_MD_INTERVAL_MS the thread wakes, reads all that came since, and sends
the pending updates (``flush``): one wake-up per interval, not one per matcher batch. A
MarketDataRequest arrives on the engine thread (``request``) and is answered there, at once, from
the mirror (or when its image arrives); the core is shared under one lock, and every message is sent
while holding it, so a W always precedes the X that follows it on the wire. Lock order: QuickFIX
holds a session's mutex while sending to it and while calling onLogout, never around fromApp; so the
engine thread takes the lock in fromApp only, and a logout is queued.

The same thread tells trading status (``status.TradingStatus``): a SecurityStatusRequest (35=e) or
TradingSessionStatusRequest (35=g) is answered on the engine thread (until the first images have come
it waits for them, STATUS_WAIT_S at most, and is answered by the thread), and wakes the thread too, which
then sends a SecurityStatus (35=f) / TradingSessionStatus (35=h) to each subscriber for every
PhaseChanged it reads. It reads from the streams' ends when it starts: what it knows of phases changed
before that comes with the BookImages it asks for, after which the matcher restates each instrument
not in continuous trading (a PhaseChanged with ``prev_phase`` equal to ``phase``, and its last
Indicative). Indicatives (the uncross a call would give now) go to the market-data core, which sends
them as entries of their own (``marketdata``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import quickfix as fix
import redis

from services.gateway.marketdata import MarketData, Out
from services.gateway.status import TradingStatus
from shared import streams
from shared.bus import REDIS_ERRORS, connect, publish, read_streams
from shared.clock import now_ns
from shared.config import Instrument
from shared.fix.codec import split_fields
from shared.schema import (
    BookImage,
    BookUpdate,
    ImageRequest,
    Indicative,
    PhaseChanged,
    SchemaError,
    Trade,
    decode_wire_batch,
)

log = logging.getLogger(__name__)

_TRADE, _UPDATE, _IMAGE, _PHASE = Trade.CODE, BookUpdate.CODE, BookImage.CODE, PhaseChanged.CODE
_INDICATIVE = Indicative.CODE
ASK_AGAIN_S = 5.0  # a shard whose images have not come (its matcher was down) is asked again
STATUS_WAIT_S = ASK_AGAIN_S  # a status request waits this long at most for the phases (then: as known)
MAX_STATUS_WAITING = 1000  # status requests waiting for the phases, all sessions together
READ_COUNT = 1000
BACK_OFF_S = 1.0  # after an error, before trying again (one log line a second at most)
SOH = "\x01"
_X_HEAD = "35=X" + SOH + "262="


class GroupSender:
    """Send a body (from tag 35 on) that holds repeating groups on a client's session.

    The message is parsed with the acceptor's dictionary: a message parsed from text without one
    does not know its groups, and QuickFIX would write the repeated tags out of their entries (a
    strict client rejects that: "Required tag missing"). The parse costs ~75 µs for an X of 46
    entries here; subscribers in step get the same X but for its MDReqID, so the parsed message is
    kept (a few, by their entries) and sent again with the next one's 262 (QuickFIX fills the header
    anew at each send).
    """

    TEMPLATES = 16

    def __init__(self, session_of: Callable[[str], fix.SessionID | None], dictionary: Path | str,
                 versions: Mapping[str, Path | str] | None = None,
                 dialect_of: Callable[[str], tuple[str, Callable[[str], str] | None]] | None = None) -> None:
        """``versions``: by BeginString other than FIX 4.4's, the dictionary its sessions' messages
        are parsed with (a FIXT session's: its application's); ``dialect_of``: a session's BeginString
        and dialect (``SessionRegistry``), None when every session is FIX 4.4."""
        self.session_of = session_of
        self.dictionary = fix.DataDictionary(str(dictionary))
        self.dictionaries = {begin: fix.DataDictionary(str(path)) for begin, path in (versions or {}).items()}
        self.dialect_of = dialect_of
        self._templates: dict[tuple[str, str], fix.Message] = {}

    def message(self, body: str, begin: str = "") -> fix.Message:
        """The message to send for ``body``. An X's is reused for the next X with the same entries
        (its MDReqID set again): the caller sends each before asking for the next (under one lock)."""
        if body.startswith(_X_HEAD):
            cut = body.find(SOH, len(_X_HEAD)) + 1
            key = (begin, body[cut:])
            template = self._templates.get(key)
            if template is None:
                if len(self._templates) >= self.TEMPLATES:
                    self._templates.clear()
                template = self._templates[key] = self._parse(body, begin)
            else:
                template.setField(262, body[len(_X_HEAD):cut - 1])
            return template
        return self._parse(body, begin)

    def _parse(self, body: str, begin: str = "") -> fix.Message:
        dictionary = self.dictionaries.get(begin, self.dictionary) if begin else self.dictionary
        return fix.Message("8=FIX.4.4" + SOH + "9=0" + SOH + body + "10=000" + SOH, dictionary, False)

    def __call__(self, session: str, body: str) -> bool:
        sid = self.session_of(session)
        if sid is None:
            return False
        begin = ""
        if self.dialect_of is not None:
            begin, dialect = self.dialect_of(session)
            if dialect is not None:
                body = dialect(body)
        try:
            return bool(fix.Session.sendToTarget(self.message(body, begin), sid))
        except fix.SessionNotFound:
            return False


class MarketFeed:
    """Start with ``start()`` (it waits for the first request), stop with ``stop()``."""

    def __init__(self, redis_url: str, instruments: Iterable[Instrument], reply_to: str,
                 send: Callable[[str, str], bool], *, interval_s: float = 0.1, max_trades: int = 50,
                 maxlen: int = 1_000_000) -> None:
        instruments = tuple(instruments)
        self.core = MarketData(instruments, max_trades=max_trades)
        self.status = TradingStatus(instruments)
        self.shards: dict[str, list[str]] = {}
        for i in instruments:
            self.shards.setdefault(i.shard, []).append(i.symbol)
        self.redis_url = redis_url
        self.reply_to = reply_to
        self.send = send
        self.interval_s = interval_s
        self.maxlen = maxlen
        self.lock = threading.Lock()
        self.sent = {"W": 0, "X": 0, "Y": 0, "f": 0, "h": 0}
        self.unroutable = 0
        self.errors = 0
        self._ended: deque[str] = deque()  # sessions logged out, for the core to forget
        # Status requests that came before the phases were known (the first images): answered then.
        self._status_waiting: list[tuple[float, str, str, dict[str, str]]] = []
        self._wanted = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gateway-marketdata", daemon=True)

    def start(self) -> MarketFeed:
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 3.0) -> None:
        self._stop.set()
        self._wanted.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    def stats(self) -> dict[str, int]:
        with self.lock:
            self._drop_ended()
            held = sum(len(s) for s in self.core.sessions.values())
        return {"md_subscriptions": held,
                "md_w_sent": self.sent["W"], "md_x_sent": self.sent["X"], "md_y_sent": self.sent["Y"],
                "md_unroutable": self.unroutable}

    # ------------------------------------------------------------------ engine thread

    def request(self, session: str, raw: str) -> None:
        """A MarketDataRequest (35=V) from ``session``: answered now, or when its mirror is ready."""
        with self.lock:
            self._drop_ended()
            self._send(self.core.request(session, raw))
        self._wanted.set()

    def status_request(self, session: str, msg_type: str, raw: str) -> None:
        """A SecurityStatusRequest (e) or TradingSessionStatusRequest (g): answered now; with 263=1,
        told again at every phase change."""
        with self.lock:
            self._drop_ended()
            if self._phases_known() or len(self._status_waiting) >= MAX_STATUS_WAITING:
                self._send(self.status.request(session, msg_type, split_fields(raw), now_ns()))
            else:  # this gateway has not read a phase yet: its first images restate them
                self._status_waiting.append((time.monotonic(), session, msg_type, split_fields(raw)))
        self._wanted.set()

    def _phases_known(self) -> bool:
        """Whether every book's image has come: the matcher restates each phase after its images."""
        return all(self.core.ready(s) for symbols in self.shards.values() for s in symbols)

    def _answer_status(self) -> None:
        """Answer the status requests that waited for the phases (or for STATUS_WAIT_S: as known)."""
        if not self._status_waiting:
            return
        known = self._phases_known()
        if not known and time.monotonic() - self._status_waiting[0][0] < STATUS_WAIT_S:
            return
        waiting, self._status_waiting = self._status_waiting, []
        for _at, session, msg_type, fields in waiting:
            self._send(self.status.request(session, msg_type, fields, now_ns()))

    def session_ended(self, session: str) -> None:
        """The session logged out: its subscriptions go before the next flush or request.

        Queued, not applied here: QuickFIX calls onLogout holding that session's mutex, and the
        thread may hold ``lock`` while sending to that very session (waiting for the same mutex).
        """
        self._ended.append(session)

    def _drop_ended(self) -> None:
        while self._ended:
            session = self._ended.popleft()
            self.core.drop_session(session)
            self.status.drop_session(session)
            if self._status_waiting:
                self._status_waiting = [w for w in self._status_waiting if w[1] != session]

    def _send(self, outs: list[Out]) -> None:
        """Send under the lock (see the module's docstring); never raises."""
        sent, send = self.sent, self.send
        for session, body in outs:
            try:
                if send(session, body):
                    sent[body[3]] += 1
                else:
                    self.unroutable += 1
            except Exception:
                self.errors += 1
                log.exception("cannot send market data to %s", session)

    # ------------------------------------------------------------------ the thread

    def _run(self) -> None:
        self._wanted.wait()
        if self._stop.is_set():
            return
        names = [streams.shard_market_stream(shard) for shard in sorted(self.shards)]
        log.info("market data: following %s (tid %d)", ", ".join(names), threading.get_native_id())
        r: redis.Redis | None = None
        last_ids: dict[str, Any] | None = None
        asked: dict[str, float] = {}
        next_flush = time.monotonic()
        while not self._stop.is_set():
            try:
                if r is None:
                    r = connect(self.redis_url)
                if last_ids is None:
                    last_ids = self._newest_ids(r, names)
                self._ask(r, asked)
                self._read_all(r, last_ids)
                with self.lock:
                    self._drop_ended()
                    self._answer_status()
                    self._send(self.core.flush())
            except REDIS_ERRORS as exc:
                log.warning("market data: Redis: %s; retrying in %.0f s", exc, BACK_OFF_S)
                r = None
                self._stop.wait(BACK_OFF_S)
            except Exception:
                self.errors += 1
                log.exception("market data: error (caught: the thread goes on)")
                self._stop.wait(BACK_OFF_S)
            next_flush = max(next_flush + self.interval_s, time.monotonic())
            self._stop.wait(next_flush - time.monotonic())

    @staticmethod
    def _newest_ids(r: redis.Redis, names: list[str]) -> dict[str, Any]:
        """Each market stream's last id now (0-0 for one not written yet)."""
        ids: dict[str, Any] = {}
        for name in names:
            newest: Any = r.xrevrange(name, count=1)
            ids[name] = newest[0][0] if newest else b"0-0"
        return ids

    def _read_all(self, r: redis.Redis, last_ids: dict[str, Any]) -> None:
        """Once per interval, everything the streams hold by now: one wake-up per interval instead of
        one per matcher batch (each takes the GIL from the engine thread)."""
        while True:
            full = False
            for name, entries in read_streams(r, last_ids, READ_COUNT):
                last_ids[name.decode()] = entries[-1][0]
                self._apply(entries)
                full = full or len(entries) >= READ_COUNT
            if not full:
                return

    def _ask(self, r: redis.Redis, asked: dict[str, float]) -> None:
        """Ask each shard whose books are not all mirrored yet for its images; again after a while
        while requests wait for them (its matcher was down, or busy recovering)."""
        now = time.monotonic()
        for shard, symbols in self.shards.items():
            if all(self.core.ready(s) for s in symbols):
                continue
            if shard in asked and (now - asked[shard] < ASK_AGAIN_S or not self.core.waiting):
                continue
            publish(r, streams.orders_stream(shard), [ImageRequest(self.reply_to, now_ns())], self.maxlen)
            asked[shard] = now

    def _apply(self, entries: Any) -> None:
        core = self.core
        with self.lock:
            for _entry_id, fields in entries:
                payload = fields.get(streams.BATCH_FIELD)
                if payload is None:
                    continue
                try:
                    items = decode_wire_batch(payload)
                except SchemaError:
                    continue
                if any(item[0] == _IMAGE for item in items):
                    # The matcher restates phases and Indicatives right after its images, in the same
                    # entry: the W a waiting request gets at its image shows them too (not a W, then X).
                    for item in items:
                        if item[0] == _PHASE:
                            core.apply_phase(item[1], item[2])
                        elif item[0] == _INDICATIVE:
                            core.apply_indicative(item[1], item[2], item[3], item[4], item[5])
                for item in items:
                    code = item[0]
                    if code == _UPDATE:
                        core.apply_update(item[1], item[2])
                    elif code == _TRADE:
                        core.apply_trade(item[1], item[2], item[3])
                    elif code == _IMAGE:
                        self._send(core.apply_image(item[1], item[2], item[3]))
                    elif code == _PHASE:
                        core.apply_phase(item[1], item[2])
                        self._send(self.status.phase_changed(item[1], item[2], item[3], item[4], item[5]))
                    elif code == _INDICATIVE:
                        core.apply_indicative(item[1], item[2], item[3], item[4], item[5])
