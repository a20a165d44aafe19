"""What every page of one web instance shares: Redis, the dictionary, limits, the market feed, status."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import secrets
import time
from collections import Counter
from collections.abc import Coroutine
from typing import Any, Protocol, cast

import redis
import redis.asyncio as aredis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff

from services.web.limits import PageLimiter
from services.web.settings import WebSettings
from services.web.views import JSON, MarketMessage, MarketView, hello_view
from shared import health, redis_cluster, streams
from shared.bus import REDIS_ERRORS, read_streams_async
from shared.clock import now_ns
from shared.fix import dictionary
from shared.schema import Depth, Indicative, PhaseChanged, SchemaError, Trade, decode_batch
from shared.streams import inspect

log = logging.getLogger(__name__)
MARKET_LOOKBACK = 2000  # stream entries read back at start-up to find each book's latest depth
MARKET_READ = 2000  # stream entries per XREAD of the market feed (one per matcher batch)
MARKET_TYPES = (Depth, Trade, PhaseChanged, Indicative)  # what the pages show of the market streams


class PageLike(Protocol):
    """What the hub needs of a page (services.web.lab.Page)."""

    def send(self, msg: JSON) -> None: ...


class LabLike(Protocol):
    """What the hub and the app need of a lab link (services.web.lab.LabLink)."""

    task: asyncio.Task[None] | None

    @property
    def live(self) -> bool: ...

    def abandon(self) -> None: ...


class Hub:
    """What every page of this web instance shares: Redis, the dictionary, limits, the market."""

    def __init__(self, settings: WebSettings) -> None:
        self.settings = settings
        # A pooled connection that the server closed (Redis restarted) fails on its first use: the
        # command goes again on a fresh connection. Connection errors only: after a time-out the
        # command may have run, and a visitor's order must not be sent twice.
        url = settings.common.redis_url
        if redis_cluster.is_cluster_url(url):
            # A Redis Cluster: redis-py's cluster clients (each command names one slot; the market
            # feed reads one stream per command, shared.bus.read_streams_async).
            self.r: aredis.Redis = cast(aredis.Redis, redis_cluster.async_cluster_client(url))
            self.sync_r: redis.Redis = cast(redis.Redis, redis_cluster.cluster_client(url))
        else:
            self.r = aredis.Redis.from_url(
                url, socket_timeout=5, socket_connect_timeout=5,
                retry=Retry(ExponentialBackoff(cap=0.2, base=0.02), 2),
                retry_on_error=[redis.ConnectionError])
            self.sync_r = redis.Redis.from_url(url, socket_timeout=5)
        self.dictionary = dictionary.load()
        self.limiter = PageLimiter(settings.pages_per_address, settings.pages_total)
        self.market = MarketView(settings.common, settings.tape_size, settings.schedule)
        self.pages: set[PageLike] = set()
        self.labs: set[LabLike] = set()
        self.counters: Counter[str] = Counter()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._rates: dict[str, tuple[float, int]] = {}
        self._resume_secret: bytes | None = None

    async def resume_token(self, lab_id: str) -> str:
        """What a page must show to follow ``lab_id`` again: an HMAC of it under a secret kept in
        Redis (the first web creates it; a restarted one reads it back)."""
        if self._resume_secret is None:
            await self.r.set(streams.WEB_RESUME_SECRET_KEY, secrets.token_bytes(32), nx=True)
            secret: Any = await self.r.get(streams.WEB_RESUME_SECRET_KEY)
            self._resume_secret = bytes(secret)
        return hmac.new(self._resume_secret, lab_id.encode(), hashlib.sha256).hexdigest()[:32]

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
        """Follow every shard's market stream for every page; start from each book's latest depth.

        Under a flood the feed reads at most once per ``market_interval_s`` and conflates what it
        read (see ``_apply_market``): one XREAD, one depth per book and at most a tape of trades per
        interval, instead of a read and a WebSocket frame per matcher batch. A quiet market's first
        entry still goes out as soon as it is read.
        """
        last = {streams.shard_market_stream(shard): "0-0" for shard in self.settings.common.shards}
        delay = 0.05
        primed = False
        interval = self.settings.market_interval_s
        loop = asyncio.get_running_loop()
        next_read = 0.0
        while True:
            try:
                if not primed:
                    await self._prime_market(last)
                    primed = True
                wait = next_read - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                rows = await read_streams_async(self.r, last, MARKET_READ, 1000)
                delay = 0.05
            except REDIS_ERRORS as exc:
                log.warning("market feed: redis unavailable (%s); retrying in %.2fs", exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)
                continue
            for name, entries in rows:
                if entries:
                    last[name.decode()] = entries[-1][0].decode()
                    next_read = loop.time() + interval
                    self._apply_market([fields for _, fields in entries], broadcast=True)

    async def _prime_market(self, last: dict[str, str]) -> None:
        """Each market stream's latest entries, applied without broadcasting; ``last`` notes its id."""
        for name in last:
            rows: Any = await self.r.xrevrange(name, count=MARKET_LOOKBACK)
            self._apply_market([fields for _, fields in reversed(rows)], broadcast=False)
            if rows:
                last[name] = rows[0][0].decode()

    def _apply_market(self, entries: list[dict[bytes, bytes]], *, broadcast: bool) -> None:
        """Apply stream entries to the market view, in order, and broadcast what pages show.

        With an interval, what a page would replace before anyone sees it is skipped: a depth
        replaces its book (only each book's last depth of the read counts) and the page shows the
        latest trades (only the last ``tape_size`` of the read count). The view ends the same.
        """
        msgs: list[MarketMessage] = []
        for fields in entries:
            try:
                batch = decode_batch(fields.get(streams.BATCH_FIELD, b""))
            except SchemaError as exc:
                log.error("market stream entry does not decode: %s", exc)
                continue
            msgs += [m for m in batch if isinstance(m, MARKET_TYPES)]
        if self.settings.market_interval_s > 0 or not broadcast:
            kept = _latest(msgs, self.settings.tape_size)
            self.counters["market_conflated"] += len(msgs) - len(kept) if broadcast else 0
            msgs = kept
        now = now_ns()
        for m in msgs:
            view = self.market.apply(m, now)
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


def _latest(msgs: list[MarketMessage], trades: int) -> list[MarketMessage]:
    """``msgs`` without what a later message replaces: each book's last depth and last Indicative,
    the last ``trades`` trades, every PhaseChanged, in their order. (A phase view shows the last
    PhaseChanged and the last Indicative, whichever came first, so the view ends the same.)"""
    books: set[str] = set()
    indicatives: set[str] = set()
    kept: list[MarketMessage] = []
    for m in reversed(msgs):
        if isinstance(m, Depth):
            if m.symbol not in books:
                books.add(m.symbol)
                kept.append(m)
        elif isinstance(m, PhaseChanged):
            kept.append(m)
        elif isinstance(m, Indicative):
            if m.symbol not in indicatives:
                indicatives.add(m.symbol)
                kept.append(m)
        elif trades > 0:
            trades -= 1
            kept.append(m)
    kept.reverse()
    return kept


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
