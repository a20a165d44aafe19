"""Lab pages trading through the web while a fault happens: what they saw.

Each page is the load run's page (``benchmarks.load.run_page``): it opens the lab WebSocket, logs its
lab session on and sends a Day order at a steady rate, buy and sell in turn at one price on BIRCH.LAB,
so the pages trade with each other beside the FIX load on ACORN.LAB. They run on an asyncio loop of
their own thread, started before the fault and stopped after it.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading

from benchmarks.load import PageStats, run_page


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

    def summary(self) -> str:
        sent = sum(s.orders_sent for s in self.stats)
        fills = sum(s.fills for s in self.stats)
        errors = sum(len(s.errors) for s in self.stats)
        notices = sorted({t for s in self.stats for t in s.notices})
        closed = [s.closed for s in self.stats if s.closed]
        out = f"{len(self.stats)} lab pages: {sent} orders, {fills} fills, {errors} errors"
        if notices:
            out += f", told: {'; '.join(n[:80] for n in notices[:2])}"
        if closed or self.failure:
            out += f", closed: {(closed or [self.failure])[0][:80]}"
        return out
