"""One page and its lab session: commands from the WebSocket to the bus, the session's stream back.

A ``Page`` owns a bounded outgoing queue (a page that cannot keep up is dropped, never the server),
an order token bucket and at most one ``LabLink`` at a time (one FIX session per page).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import secrets
import time
from typing import TYPE_CHECKING, Any

from fastapi import WebSocket, WebSocketDisconnect
from starlette.websockets import WebSocketState

from services.web.commands import Command, CommandError, parse_command
from services.web.limits import TokenBucket
from services.web.views import JSON, error_view, execution_view, notice_view, state_view, wire_view
from shared import streams
from shared.bus import REDIS_ERRORS, id_after, publish
from shared.clock import now_ns
from shared.fix import dictionary
from shared.fix.codec import field
from shared.fix.dictionary import Dictionary
from shared.fix.mdbook import MdBooks
from shared.fix.versions import BY_BEGIN_STRING
from shared.fix.wire import ParsedMessage
from shared.schema import (
    ORD_MARKET,
    ORD_STOP,
    ORD_STOP_LIMIT,
    LabCommand,
    LabNotice,
    LabStart,
    LabState,
    SchemaError,
    WireRecord,
    decode_batch,
)

if TYPE_CHECKING:
    from services.web.hub import Hub

log = logging.getLogger(__name__)

ENDED = ("ended", "logged_out")
LAB_STREAM_TTL_S = 300  # a finished session's stream is kept this long, then Redis drops it
TOO_SLOW = 1013  # WebSocket close code "try again later": the page fell behind
# Ops that make the visitor's engine send a FIX message: they share the page's token bucket.
FIX_OPS = frozenset({"order", "cancel", "replace", "status", "mass_cancel", "md_subscribe", "md_unsubscribe"})


def order_kind(ord_type: int, stop_px: str) -> str:
    """A LabCommand's ``value`` for an order of ``ord_type`` (shared.fix.orders.LabOrders.new_order
    reads it): "" a limit order, "mkt", "stop:STOPPX", "stoplimit:STOPPX"."""
    if ord_type == ORD_MARKET:
        return "mkt"
    if ord_type == ORD_STOP:
        return f"stop:{stop_px}"
    if ord_type == ORD_STOP_LIMIT:
        return f"stoplimit:{stop_px}"
    return ""


def dictionary_of(raw: bytes, fix44: Dictionary) -> Dictionary:
    """The names of a session's wire from the BeginString of one of its messages (a resumed session,
    whose version the page did not say): FIX.4.2's, FIXT.1.1's (FIX 5.0 SP2), else ``fix44``."""
    found = BY_BEGIN_STRING.get(field(raw, 8) or "")
    if found is None or found.name == "4.4":
        return fix44
    return dictionary.load_version(found.name)


class LabLink:
    """A lab session this web instance started: follows its stream, sends its commands."""

    def __init__(self, hub: Hub, page: Page, lab_id: str | None = None) -> None:
        self.hub = hub
        self.page: Page | None = page
        self.lab_id = lab_id or secrets.token_hex(8)
        self.gateway_id: str | None = None
        self.state: LabState | None = None
        self.started = time.monotonic()
        self.task: asyncio.Task[None] | None = None
        self.logout_sent = False
        self.logout_wanted = False  # asked for before a gateway took the session
        self.md = MdBooks(hub.settings.common.instruments)  # what the session's own W and X rebuild
        # Resuming (a page back after its socket closed): records up to ``skip_n`` are on the page
        # already; the stream up to ``catch_up_to`` is read quietly, then the state and books go out.
        self.skip_n = 0
        self.catch_up_to: str | None = None
        # The names on its wire: its FIX version's dictionary, chosen once (start; a resumed session's
        # first record's BeginString).
        self.dictionary: Dictionary | None = None

    @property
    def live(self) -> bool:
        return self.state is None or self.state.status not in ENDED

    async def start(self, client_addr: str, fix_version: str = "4.4") -> None:
        # Parsed once per process (FIX 5.0 SP2's takes ~0.4 s): off the event loop.
        self.dictionary = (self.hub.dictionary if fix_version == "4.4"
                           else await asyncio.to_thread(dictionary.load_version, fix_version))
        await publish(self.hub.r, streams.LAB_START_STREAM,
                      [LabStart(self.lab_id, client_addr, now_ns(), fix_version)],
                      self.hub.settings.common.stream_maxlen)
        self.task = asyncio.create_task(self._follow(), name=f"lab-{self.lab_id}")

    async def resume(self, last_n: int) -> bool:
        """Follow a session another page socket (or another web process) started; False when it
        has ended or its stream is gone."""
        stream = streams.lab_stream(self.lab_id)
        last: Any = await self.hub.r.xrevrange(stream, count=1)
        if not last:
            return False
        self.skip_n, self.catch_up_to = last_n, last[0][0].decode()
        self.task = asyncio.create_task(self._follow(), name=f"lab-{self.lab_id}")
        return True

    async def command(self, cmd: LabCommand) -> None:
        if self.gateway_id is None:
            raise CommandError("the exchange has not taken your session yet: wait for the Logon")
        await publish(self.hub.r, streams.lab_commands_stream(self.gateway_id), [cmd], 10_000)

    def _emit(self, msg: JSON) -> None:
        if self.page is not None:
            self.page.send(msg)

    def abandon(self) -> None:
        """The page closed: log the session out (now, or as soon as a gateway has taken it)."""
        self.page = None
        if self.live:
            self.hub.spawn(self._logout())

    async def _logout(self) -> None:
        if self.logout_sent or self.gateway_id is None:
            return
        self.logout_sent = True
        with contextlib.suppress(*REDIS_ERRORS):
            await self.command(LabCommand(self.lab_id, "logout", ts=now_ns()))

    async def _follow(self) -> None:
        stream = streams.lab_stream(self.lab_id)
        last = "0-0"
        deadline = self.started + self.hub.settings.start_timeout_s
        delay = 0.05
        try:
            while True:
                if self.gateway_id is None and time.monotonic() > deadline:
                    self._emit(error_view("No exchange gateway took the session in "
                                          f"{self.hub.settings.start_timeout_s:g} s: the exchange may be "
                                          "down. Try again later.", "no_gateway"))
                    self._emit({"type": "state", "lab_id": self.lab_id, "status": "ended",
                                "text": "no gateway answered", "orders": []})
                    self.state = LabState(self.lab_id, "", "", "ended", 0, 0, 0, 0, 0, 0, False, False,
                                          (), "no gateway answered", now_ns())
                    return
                if self.page is None and not self.live:
                    return
                if self.page is None and time.monotonic() > deadline + 30:
                    return  # the page is gone and the gateway's own 10 minutes end the session
                try:
                    rows: Any = await self.hub.r.xread({stream: last}, count=200, block=500)
                    delay = 0.05
                except REDIS_ERRORS as exc:
                    log.warning("lab %s: redis unavailable (%s)", self.lab_id, exc)
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 2.0)
                    continue
                for _, entries in rows or ():
                    for entry_id, fields in entries:
                        last = entry_id.decode()
                        self._apply(fields)
                        if self.catch_up_to is not None and not id_after(self.catch_up_to, last):
                            self._caught_up()
                if (self.page is None or self.logout_wanted) and self.gateway_id is not None \
                        and not self.logout_sent:
                    await self._logout()
                if self.state is not None and self.state.status == "ended":
                    return  # the gateway's last word on this session
                if self.state is not None and not self.live and self.page is None:
                    return
        finally:
            with contextlib.suppress(*REDIS_ERRORS):
                await self.hub.r.expire(stream, LAB_STREAM_TTL_S)

    def _caught_up(self) -> None:
        """The resumed page now has what it missed: the session's state and its books."""
        self.catch_up_to = None
        if self.state is not None:
            self._emit(state_view(self.state, now_ns(), self.hub.settings.open_orders))
        for symbol in list(self.md.books):
            self._emit(self.md.view(symbol))

    def _market_data(self, p: ParsedMessage, source: str, withheld: bool) -> None:
        """Rebuild the session's books from the W and X it received; drop one it unsubscribed, or
        that the exchange refused (Y)."""
        quiet = self.catch_up_to is not None
        if source == "exchange":
            for symbol in self.md.apply(p):
                if not quiet:
                    self._emit(self.md.view(symbol))
        elif not withheld:
            for symbol in self.md.sent(p):
                if not quiet:
                    self._emit(self.md.view(symbol))

    def _apply(self, fields: dict[bytes, bytes]) -> None:
        try:
            msgs = decode_batch(fields.get(streams.BATCH_FIELD, b""))
        except SchemaError as exc:
            self._emit(error_view(f"an entry on the session's stream did not decode: {exc}", "bus"))
            return
        quiet = self.catch_up_to is not None  # a resumed page's catch-up: only what it lacks
        for m in msgs:
            if isinstance(m, WireRecord):
                if self.dictionary is None:
                    self.dictionary = dictionary_of(m.raw, self.hub.dictionary)
                view, parsed = wire_view(m, self.dictionary)
                if m.n > self.skip_n:
                    self._emit(view)
                    extra = execution_view(parsed, m.source)
                    if extra is not None:
                        self._emit(extra)
                self._market_data(parsed, m.source, m.withheld)
            elif isinstance(m, LabState):
                self.state = m
                if m.gateway_id:
                    self.gateway_id = m.gateway_id
                if not quiet:
                    self._emit(state_view(m, now_ns(), self.hub.settings.open_orders))
            elif isinstance(m, LabNotice) and not quiet:
                self._emit(notice_view(m))


class Page:
    """One open lab page (one WebSocket)."""

    def __init__(self, hub: Hub, ws: WebSocket, address: str) -> None:
        self.hub = hub
        self.ws = ws
        self.address = address
        s = hub.settings
        self.queue: asyncio.Queue[JSON] = asyncio.Queue(maxsize=s.queue_size)
        self.bucket = TokenBucket(s.order_burst, s.order_rate)
        self.lab: LabLink | None = None
        self.too_slow = asyncio.Event()

    def send(self, msg: JSON) -> None:
        """Queue a message for the page; a page whose queue is full is dropped."""
        if self.too_slow.is_set():
            return
        try:
            self.queue.put_nowait(msg)
        except asyncio.QueueFull:
            self.hub.counters["pages_dropped"] += 1
            log.warning("page %s fell %d messages behind: dropping it", self.address, self.queue.maxsize)
            self.too_slow.set()

    async def _writer(self) -> None:
        while True:
            msg = await self.queue.get()
            await self.ws.send_text(json.dumps(msg, separators=(",", ":")))

    async def _reader(self) -> None:
        while True:
            frame = await self.ws.receive()
            if frame["type"] == "websocket.disconnect":
                return
            data = frame.get("text")
            if data is None:
                data = frame.get("bytes") or b""
            self.hub.counters["commands"] += 1
            try:
                cmd = parse_command(data, self.hub.settings.max_frame_bytes)
                await self._handle(cmd)
            except CommandError as exc:
                self.hub.counters["command_errors"] += 1
                self.send(error_view(str(exc), "bad_command", _cmd_id(data)))
            except REDIS_ERRORS as exc:
                log.warning("redis unavailable for a command: %s", exc)
                self.send(error_view("The exchange's bus is unavailable right now; nothing was sent. "
                                     "Try again in a moment.", "unavailable"))

    async def run(self) -> None:
        self.send(self.hub.hello())
        for m in self.hub.market.snapshot(now_ns()):
            self.send(m)
        tasks = [asyncio.create_task(self._writer()), asyncio.create_task(self._reader()),
                 asyncio.create_task(self.too_slow.wait())]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for t in tasks:
                t.cancel()
            for t in tasks:
                with contextlib.suppress(asyncio.CancelledError, WebSocketDisconnect, RuntimeError,
                                         *REDIS_ERRORS):
                    await t
            if self.too_slow.is_set() and self.ws.application_state == WebSocketState.CONNECTED:
                with contextlib.suppress(RuntimeError, WebSocketDisconnect):
                    await self.ws.close(TOO_SLOW, "this page fell too far behind the wire")
            if self.lab is not None:
                self.lab.abandon()

    async def _handle(self, cmd: Command) -> None:
        if cmd.op == "ping":
            self.send({"type": "pong", "id": cmd.id})
            return
        if cmd.op == "logon":
            if self.lab is not None and self.lab.live:
                raise CommandError("One FIX session per page: this page's session is still open. "
                                   "Log out first.")
            if self.lab is not None:
                self.lab.page = None  # a finished session's last records must not mix with the new one
            self.hub.labs = {lab for lab in self.hub.labs if lab.task is None or not lab.task.done()}
            link = LabLink(self.hub, self)
            await link.start(self.address, cmd.value or "4.4")  # a Redis error leaves the page free to retry
            self.lab = link
            self.hub.labs.add(link)
            self.send({"type": "logon_sent", "lab_id": link.lab_id, "id": cmd.id,
                       "resume_token": await self.hub.resume_token(link.lab_id)})
            return
        if cmd.op == "resume":
            await self._resume(cmd)
            return
        lab = self.lab
        if lab is None or not lab.live:
            raise CommandError("Log on first: this page has no open FIX session.")
        if cmd.op in FIX_OPS:
            wait = self.bucket.take(time.monotonic())
            if wait > 0:
                s = self.hub.settings
                self.hub.counters["rate_limited"] += 1
                self.send(error_view(
                    f"Slow down: up to {s.order_burst} orders at once, then {s.order_rate:g} per second. "
                    f"Nothing was sent; try again in {wait:.1f} s.", "rate_limited", cmd.id))
                return
        ts = now_ns()
        if cmd.op == "order":
            await lab.command(LabCommand(lab.lab_id, "order", cmd.symbol, cmd.side, cmd.price, cmd.qty,
                                         ts=ts, tif=cmd.tif, value=order_kind(cmd.ord_type, cmd.stop_px)))
        elif cmd.op in ("cancel", "replace"):
            order = next((o for o in (lab.state.orders if lab.state else ()) if o.clordid == cmd.clordid),
                         None)
            if order is None:
                # Sent anyway: the exchange's OrderCancelReject is the lesson.
                symbol, side = "", 0
            else:
                symbol, side = order.symbol, order.side
            await lab.command(LabCommand(lab.lab_id, cmd.op, symbol, side, cmd.price, cmd.qty,
                                         orig_clordid=cmd.clordid, ts=ts))
        elif cmd.op == "status":
            await lab.command(LabCommand(lab.lab_id, "status", orig_clordid=cmd.clordid, ts=ts))
        elif cmd.op in ("mass_cancel", "md_subscribe", "md_unsubscribe", "stp"):
            await lab.command(LabCommand(lab.lab_id, cmd.op, cmd.symbol, ts=ts, value=cmd.value))
        elif cmd.op == "logout" and lab.gateway_id is None:
            lab.logout_wanted = True  # sent as soon as a gateway has taken the session
        elif cmd.op == "logout":
            lab.logout_sent = True
            await lab.command(LabCommand(lab.lab_id, cmd.op, ts=ts))
        else:
            await lab.command(LabCommand(lab.lab_id, cmd.op, ts=ts))
        self.hub.counters["commands_sent"] += 1


    async def _resume(self, cmd: Command) -> None:
        """Follow again the session this page had before its socket closed (the web restarted, the
        network dropped): only with the token logon_sent gave it, so no other page can."""
        if not hmac.compare_digest(cmd.token, await self.hub.resume_token(cmd.lab_id)):
            raise CommandError("That session cannot be resumed from this page.")
        if self.lab is not None and self.lab.live:
            raise CommandError("This page already follows a session.")
        link = LabLink(self.hub, self, cmd.lab_id)
        if not await link.resume(cmd.last_n):
            self.send({"type": "state", "lab_id": cmd.lab_id, "status": "ended", "orders": [],
                       "text": "it ended while this page was away (its record is gone)"})
            return
        self.lab = link
        self.hub.labs.add(link)
        self.send({"type": "resumed", "lab_id": cmd.lab_id, "id": cmd.id})


def _cmd_id(data: str | bytes) -> str | None:
    try:
        obj = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return None
    cid = obj.get("id") if isinstance(obj, dict) else None
    return str(cid)[:64] if isinstance(cid, str | int) and not isinstance(cid, bool) else None
