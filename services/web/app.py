"""The web service: the lab page, its WebSocket, the market feed and the status view."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import redis
import redis.asyncio as aredis
from fastapi import FastAPI, WebSocket
from fastapi.responses import FileResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff

from services.gateway.dictionary import FILE_NAME as DICTIONARY_FILE
from services.gateway.dictionary import exchange_dictionary_file
from services.web import dictionary
from services.web.lab import LabLink, Page
from services.web.limits import PageLimiter
from services.web.settings import WebSettings
from services.web.views import JSON, MarketView, hello_view
from shared import health, streams
from shared.bus import REDIS_ERRORS
from shared.schema import Depth, SchemaError, Trade, decode_batch
from shared.streams import inspect

log = logging.getLogger(__name__)
STATIC = Path(__file__).parent / "static"
MARKET_LOOKBACK = 2000  # stream entries read back at start-up to find each book's latest depth
REFUSED = 1008  # WebSocket close code "policy violation": a page limit


class Hub:
    """What every page of this web instance shares: Redis, the dictionary, limits, the market."""

    def __init__(self, settings: WebSettings) -> None:
        self.settings = settings
        # A pooled connection that the server closed (Redis restarted) fails on its first use: the
        # command goes again on a fresh connection. Connection errors only: after a time-out the
        # command may have run, and a visitor's order must not be sent twice.
        self.r: aredis.Redis = aredis.Redis.from_url(
            settings.common.redis_url, socket_timeout=5, socket_connect_timeout=5,
            retry=Retry(ExponentialBackoff(cap=0.2, base=0.02), 2), retry_on_error=[redis.ConnectionError])
        self.sync_r = redis.Redis.from_url(settings.common.redis_url, socket_timeout=5)
        self.dictionary = dictionary.load()
        self.limiter = PageLimiter(settings.pages_per_address, settings.pages_total)
        self.market = MarketView(settings.common, settings.tape_size)
        self.pages: set[Page] = set()
        self.labs: set[LabLink] = set()
        self.counters: Counter[str] = Counter()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._rates: dict[str, tuple[float, int]] = {}

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def limits(self) -> JSON:
        s = self.settings
        return {"pages_per_address": s.pages_per_address, "pages_total": s.pages_total,
                "order_burst": s.order_burst, "order_rate": s.order_rate, "open_orders": s.open_orders,
                "session_minutes": s.session_minutes, "max_command_bytes": s.max_frame_bytes}

    def hello(self) -> JSON:
        return hello_view(self.settings.common, self.limits())

    def broadcast(self, msg: JSON) -> None:
        for page in list(self.pages):
            page.send(msg)

    def health_counters(self) -> dict[str, int]:
        # Runs on the reporter's thread: read copies only (list() of a set is one C call).
        labs = list(self.labs)
        return {"pages": len(self.pages), "labs_live": sum(1 for lab in labs if lab.live),
                **dict(self.counters)}

    async def market_feed(self) -> None:
        """Follow the market stream for every page; start from each book's latest depth."""
        last = "0-0"
        delay = 0.05
        primed = False
        while True:
            try:
                if not primed:
                    rows: Any = await self.r.xrevrange(streams.MARKET_STREAM, count=MARKET_LOOKBACK)
                    for entry_id, fields in reversed(rows):
                        self._apply_market(fields, broadcast=False)
                        last = entry_id.decode()
                    primed = True
                rows = await self.r.xread({streams.MARKET_STREAM: last}, count=500, block=1000)
                delay = 0.05
            except REDIS_ERRORS as exc:
                log.warning("market feed: redis unavailable (%s); retrying in %.2fs", exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)
                continue
            for _, entries in rows or ():
                for entry_id, fields in entries:
                    last = entry_id.decode()
                    self._apply_market(fields, broadcast=True)

    def _apply_market(self, fields: dict[bytes, bytes], *, broadcast: bool) -> None:
        try:
            msgs = decode_batch(fields.get(streams.BATCH_FIELD, b""))
        except SchemaError as exc:
            log.error("market stream entry does not decode: %s", exc)
            return
        for m in msgs:
            if isinstance(m, Depth | Trade):
                view = self.market.apply(m)
                if broadcast:
                    self.broadcast(view)

    def status(self) -> JSON:
        """Counters and the bus view (blocking Redis calls: run it in a thread)."""
        r = self.sync_r
        bus = inspect.list_streams(r)
        now = time.monotonic()
        rates: dict[str, float] = {}
        for info in bus:
            name = info["stream"]
            added = int(info.get("entries_added") or _entries_added(r, name))
            before = self._rates.get(name)
            self._rates[name] = (now, added)
            if before is not None and now > before[0]:
                rates[name] = round((added - before[1]) / (now - before[0]), 2)
        orders_streams = {streams.orders_stream(s) for s in self.settings.common.shards}
        live = health.instances(r)
        groups = [g for info in bus for g in info["groups"]]
        return {
            "web": {**self.health_counters(),
                    "pages_by_address_max": max(list(self.limiter.by_address.values()), default=0)},
            "limits": self.limits(),
            # The matchers count commands per second themselves (their health reports).
            "orders_per_s": round(_sum(live, "matcher", "orders_per_s"), 1),
            "fix_sessions": int(_sum(live, "gateway", "sessions_logged_on")),
            "order_entries_per_s": round(sum(v for k, v in rates.items() if k in orders_streams), 2),
            "pending": sum(int(g["pending"]) for g in groups),
            "max_lag": max((int(g["lag"]) for g in groups if g["lag"] is not None), default=0),
            "entries_per_s": rates,
            "instances": live,
            "streams": bus,
        }


def _sum(instances: list[dict[str, str]], service: str, counter: str) -> float:
    total = 0.0
    for i in instances:
        if i.get("service") == service:
            try:
                total += float(i.get(counter, 0))
            except ValueError:
                continue
    return total


def _entries_added(r: redis.Redis, stream: str) -> int:
    try:
        info: Any = r.xinfo_stream(stream)
    except redis.ResponseError:
        return 0
    return int(info.get("entries-added", 0))


def create_app(settings: WebSettings) -> FastAPI:
    hub = Hub(settings)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        feed = asyncio.create_task(hub.market_feed(), name="market-feed")
        reporter = health.HealthReporter(hub.sync_r, "web", f"{settings.host}:{settings.port}",
                                         hub.health_counters).start()
        try:
            yield
        finally:
            # Log out every session a page still holds: a closing server leaves none behind.
            for lab in list(hub.labs):
                lab.abandon()
            if hub._tasks:
                await asyncio.wait(list(hub._tasks), timeout=3)
            feed.cancel()
            for lab in hub.labs:
                if lab.task is not None:
                    lab.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await feed
            await asyncio.to_thread(reporter.stop)
            await hub.r.aclose()
            hub.sync_r.close()

    app = FastAPI(title="FIX Lab", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.hub = hub

    @app.get("/", include_in_schema=False)
    async def index() -> FileResponse:
        return FileResponse(STATIC / "index.html")

    # The exchange's FIX 4.4 dictionary (FIX44.xml + TrdMatchID in 35=8), for people's own clients.
    fix_dictionary = exchange_dictionary_file()

    @app.get(f"/fix/{DICTIONARY_FILE}", include_in_schema=False)
    async def fix_dictionary_file() -> FileResponse:
        return FileResponse(fix_dictionary, media_type="application/xml", filename=DICTIONARY_FILE)

    @app.get("/status", include_in_schema=False)
    async def status_page() -> FileResponse:
        return FileResponse(STATIC / "status.html")

    @app.get("/api/status")
    async def api_status() -> JSONResponse:
        try:
            return JSONResponse(await asyncio.to_thread(hub.status))
        except REDIS_ERRORS as exc:
            return JSONResponse({"error": f"redis unavailable: {exc}"}, status_code=503)

    @app.get("/api/health")
    async def api_health() -> JSONResponse:
        try:
            await hub.r.ping()
        except REDIS_ERRORS as exc:
            return JSONResponse({"ok": False, "error": f"redis unavailable: {exc}"}, status_code=503)
        return JSONResponse({"ok": True, "pages": len(hub.pages)})

    @app.websocket("/ws")
    async def ws_endpoint(ws: WebSocket) -> None:
        address = ws.client.host if ws.client else "unknown"
        refusal = hub.limiter.admit(address)
        await ws.accept()
        if refusal is not None:
            hub.counters["pages_refused"] += 1
            await ws.send_json({"type": "error", "code": "page_limit", "text": refusal})
            await ws.close(REFUSED, "page limit")
            return
        page = Page(hub, ws, address)
        hub.pages.add(page)
        try:
            await page.run()
        finally:
            hub.pages.discard(page)
            hub.limiter.release(address)

    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    return app
