"""Lab pages trading through the web while a fault happens: what they saw.

Each page does what the site's own page (services/web/static/app.js) does, over a plain WebSocket:
it logs a lab session on, keeps the ``resume_token`` of ``logon_sent`` and the last wire ``n`` it
received, and when its socket closes (the web was killed) it reconnects by itself (0.5 s, then twice
as long each time up to 8 s) and sends ``resume`` (docs/websocket.md) to follow the same session
again, then trades on. Meanwhile it sends a Day order at a steady rate, buy and sell in turn at one
price on BIRCH.LAB, so the pages trade with each other beside the FIX load on ACORN.LAB. They run on
an asyncio loop of their own thread, started before the fault and stopped after it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import WebSocketException

SYMBOL = "BIRCH.LAB"
PRICE = "25.00"


@dataclass
class PageStats:
    errors: list[dict[str, Any]] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)
    orders_sent: int = 0
    fills: int = 0
    closed: str = ""  # how its socket last closed under it
    lab_id: str = ""
    token: str = ""
    last_n: int = 0  # the last wire record received
    connects: int = 0
    resumed: int = 0  # ``resumed`` answers received
    ended: str = ""  # the session ended (told by a ``state`` ended): the text
    orders_after_resume: int = 0
    fills_after_resume: int = 0
    first_fill_after_resume: float | None = None  # time.monotonic()
    logging_out: bool = False  # its own logout at the end: the session's end is no news


async def _read(ws: ClientConnection, stats: PageStats, ready: asyncio.Event) -> None:
    try:
        async for raw in ws:
            m = json.loads(raw)
            kind = m.get("type")
            if kind == "wire":
                stats.last_n = max(stats.last_n, int(m.get("n") or 0))
            elif kind == "logon_sent":
                stats.lab_id, stats.token = str(m["lab_id"]), str(m.get("resume_token") or "")
            elif kind == "resumed":
                stats.resumed += 1
            elif kind == "state" and m.get("status") == "logged_on":
                ready.set()
            elif kind == "state" and m.get("status") == "ended" and not stats.logging_out:
                stats.ended = str(m.get("text") or "ended")
                ready.set()
            elif kind == "error":
                stats.errors.append(m)
            elif kind == "notice" and m.get("level") == "error":
                stats.notices.append(str(m.get("text")))
            elif kind == "fill":
                stats.fills += 1
                if stats.resumed:
                    stats.fills_after_resume += 1
                    if stats.first_fill_after_resume is None:
                        stats.first_fill_after_resume = time.monotonic()
    except (WebSocketException, OSError) as exc:  # the socket closed under it: say how
        stats.closed = repr(exc)


async def run_page(n: int, url: str, rate: float, start_trading: asyncio.Event, stop: asyncio.Event,
                   logged_on: asyncio.Queue[int], stats: PageStats) -> None:
    delay = 0.5
    first = True
    side = "buy" if n % 2 else "sell"
    period = 1.0 / rate
    while not stop.is_set() and not stats.ended:
        try:
            async with connect(url, max_size=2**22, open_timeout=10) as ws:
                stats.connects += 1
                delay = 0.5
                ready = asyncio.Event()
                reader = asyncio.create_task(_read(ws, stats, ready))
                if stats.lab_id:
                    await ws.send(json.dumps({"op": "resume", "lab_id": stats.lab_id, "token": stats.token,
                                              "last_n": stats.last_n}))
                else:
                    await ws.send(json.dumps({"op": "logon"}))
                await asyncio.wait_for(ready.wait(), 60)
                if first:
                    first = False
                    await logged_on.put(n)
                    await start_trading.wait()
                next_at = time.monotonic()
                while not stop.is_set() and not reader.done() and not stats.ended:
                    await ws.send(json.dumps({"op": "order", "symbol": SYMBOL, "side": side, "price": PRICE,
                                              "qty": 1, "id": stats.orders_sent}))
                    stats.orders_sent += 1
                    if stats.resumed:
                        stats.orders_after_resume += 1
                    side = "sell" if side == "buy" else "buy"
                    next_at += period
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), max(0.0, next_at - time.monotonic()))
                if stop.is_set():
                    stats.logging_out = True
                    with contextlib.suppress(WebSocketException, OSError):
                        await ws.send(json.dumps({"op": "logout"}))
                        await asyncio.sleep(2)
                reader.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await reader
        except (WebSocketException, OSError, TimeoutError) as exc:
            stats.closed = repr(exc)
        if stop.is_set():
            return
        with contextlib.suppress(TimeoutError):  # reconnect by itself, as app.js does
            await asyncio.wait_for(stop.wait(), delay)
        delay = min(8.0, delay * 2)


class Pages:
    def __init__(self, url: str, count: int, rate: float = 2.0) -> None:
        self.url = url
        self.stats = [PageStats() for _ in range(count)]
        self.rate = rate
        self.logged_on = threading.Event()
        self.failure = ""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, name="chaos-pages", daemon=True)

    def start(self, timeout_s: float = 90.0) -> None:
        """Open every page and log it on; raise TimeoutError when they did not log on in time."""
        self._thread.start()
        if not self.logged_on.wait(timeout_s) or self.failure:
            raise TimeoutError(f"lab pages not logged on: {self.failure or 'no answer'}")

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except Exception as exc:  # a page that could not even open: reported, the suite goes on
            self.failure = repr(exc)
            self.logged_on.set()

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        start = asyncio.Event()
        on: asyncio.Queue[int] = asyncio.Queue()
        tasks = [asyncio.create_task(run_page(n, self.url, self.rate, start, self._stop, on, s))
                 for n, s in enumerate(self.stats)]
        for _ in tasks:
            await asyncio.wait_for(on.get(), 90)
        start.set()
        self.logged_on.set()
        for result in await asyncio.gather(*tasks, return_exceptions=True):
            if isinstance(result, BaseException) and not self.failure:
                self.failure = repr(result)

    def stop(self) -> None:
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None:
            with contextlib.suppress(RuntimeError):  # the loop already ended
                loop.call_soon_threadsafe(stop.set)
        self._thread.join(30)

    def fills(self) -> int:
        return sum(s.fills for s in self.stats)

    def resumed_and_trading(self) -> bool:
        """Every page resumed its session and got a fill after that."""
        return all(s.resumed and s.fills_after_resume for s in self.stats)

    def summary(self) -> str:
        sent = sum(s.orders_sent for s in self.stats)
        errors = sum(len(s.errors) for s in self.stats)
        notices = sorted({t for s in self.stats for t in s.notices})
        out = f"{len(self.stats)} lab pages: {sent} orders, {self.fills()} fills, {errors} errors"
        reconnects = sum(max(0, s.connects - 1) for s in self.stats)
        if reconnects:
            out += (f"; reconnected by themselves {reconnects} times, {sum(s.resumed for s in self.stats)} "
                    f"of {len(self.stats)} resumed their session, then "
                    f"{sum(s.orders_after_resume for s in self.stats)} orders, "
                    f"{sum(s.fills_after_resume for s in self.stats)} fills")
        ended = [s.ended for s in self.stats if s.ended]
        if ended:
            out += f", told the session ended: {ended[0][:80]}"
        if notices:
            out += f", told: {'; '.join(n[:80] for n in notices[:2])}"
        if self.failure:
            out += f", failed: {self.failure[:80]}"
        elif not reconnects and any(s.closed for s in self.stats):
            out += f", closed: {next(s.closed for s in self.stats if s.closed)[:80]}"
        return out
