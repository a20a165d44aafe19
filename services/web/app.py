"""The web service: the lab page, its WebSocket, the market feed and the status view."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI, WebSocket
from fastapi.responses import FileResponse, JSONResponse
from fastapi.staticfiles import StaticFiles

from services.web.certify import Certifications, mount
from services.web.hub import Hub
from services.web.lab import Page
from services.web.origin import origin_allowed
from services.web.settings import WebSettings
from shared import health
from shared.bus import REDIS_ERRORS
from shared.fix.dictionary import FILE_NAME as DICTIONARY_FILE
from shared.fix.dictionary import exchange_dictionary_file

log = logging.getLogger(__name__)
STATIC = Path(__file__).parent / "static"
REFUSED = 1008  # WebSocket close code "policy violation": a page limit


def create_app(settings: WebSettings) -> FastAPI:
    hub = Hub(settings)
    certs = Certifications(settings.certify)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        feed = asyncio.create_task(hub.market_feed(), name="market-feed")
        reporter = health.HealthReporter(hub.sync_r, "web", f"{settings.host}:{settings.port}",
                                         hub.health_counters).start()
        try:
            yield
        finally:
            await certs.close(0.5)  # kills the certification runs (SIGKILL: they end at once)
            # Log out every session a page still holds: a closing server leaves none behind.
            for lab in list(hub.labs):
                lab.abandon()
            # Bounded throughout: the runner kills what has not stopped 8 s after SIGTERM, and
            # uvicorn's graceful shutdown may have taken 3 of them already.
            if hub._tasks:
                await asyncio.wait(list(hub._tasks), timeout=2)
            feed.cancel()
            for lab in hub.labs:
                if lab.task is not None:
                    lab.task.cancel()
            await asyncio.wait([feed], timeout=1)
            await asyncio.wait([asyncio.create_task(asyncio.to_thread(reporter.stop))], timeout=1)
            with contextlib.suppress(*REDIS_ERRORS, TimeoutError):
                await asyncio.wait_for(hub.r.aclose(), 1)
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
        if not origin_allowed(ws.headers.get("origin"), ws.headers.get("host"), settings.origins):
            hub.counters["origins_refused"] += 1
            log.warning("WebSocket refused: origin %r is not this page's", ws.headers.get("origin"))
            await ws.close(REFUSED)  # before accept: the handshake gets HTTP 403
            return
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

    mount(app, certs, STATIC, settings.origins)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    return app
