"""The web service's settings: read once from the environment, frozen."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from services.web.certify import CertifySettings, certify_settings
from services.web.origin import parse_origins
from shared.config import CommonSettings, ConfigError, common_settings, env_float, env_int, env_str
from shared.schedule import Schedule, parse_schedule


@dataclass(frozen=True, slots=True)
class WebSettings:
    common: CommonSettings
    host: str
    port: int
    pages_per_address: int  # open lab pages (WebSockets) one address may hold
    pages_total: int  # open lab pages across this web instance
    order_burst: int  # token bucket: orders at once ...
    order_rate: float  # ... then this many per second
    open_orders: int  # shown on the page; the matcher enforces it
    session_minutes: int  # shown on the page; the gateway enforces it
    max_frame_bytes: int  # a command larger than this gets an error (the page stays)
    ws_max_bytes: int  # a frame larger than this closes the WebSocket (uvicorn's limit)
    queue_size: int  # per page outgoing messages; a page that falls this far behind is dropped
    start_timeout_s: float  # how long to wait for a gateway to take a LabStart
    tape_size: int  # trades kept for new pages
    market_interval_s: float  # a busy market reaches the pages at most once per this (0: every entry)
    stall_s: int  # a connection whose peer has read nothing of what is sent to it for this long is cut
    certify: CertifySettings  # the page's certification runs (services/web/certify.py)
    origins: frozenset[str] = frozenset()  # pages of these origins may open a WebSocket, besides our own
    # The trading day the gateways drive (FIXLAB_SCHEDULE): the page counts down to a call's scheduled
    # uncross. None: no schedule (continuous, or phases set by the operator only).
    schedule: Schedule | None = None

    def __repr__(self) -> str:
        return f"WebSettings(host={self.host!r}, port={self.port}, common={self.common!r})"


def web_settings(env: Mapping[str, str] | None = None) -> WebSettings:
    env = os.environ if env is None else env
    common = common_settings(env)
    return WebSettings(
        common=common,
        host=env_str(env, "FIXLAB_WEB_HOST", "127.0.0.1"),
        port=env_int(env, "FIXLAB_WEB_PORT", 8000, lo=0, hi=65535),
        pages_per_address=env_int(env, "FIXLAB_PAGES_PER_ADDRESS", 2, lo=1),
        pages_total=env_int(env, "FIXLAB_PAGES_TOTAL", 20, lo=1),
        order_burst=env_int(env, "FIXLAB_ORDER_BURST", 5, lo=1),
        order_rate=env_float(env, "FIXLAB_ORDER_RATE", 2.0, lo=0.01),
        open_orders=env_int(env, "FIXLAB_MAX_OPEN_ORDERS", 20, lo=1),
        session_minutes=env_int(env, "FIXLAB_SESSION_MINUTES", 10, lo=1),
        max_frame_bytes=env_int(env, "FIXLAB_WS_MAX_COMMAND_BYTES", 2048, lo=256),
        ws_max_bytes=env_int(env, "FIXLAB_WS_MAX_FRAME_BYTES", 65536, lo=1024),
        queue_size=env_int(env, "FIXLAB_WS_QUEUE", 2000, lo=10),
        start_timeout_s=env_float(env, "FIXLAB_LAB_START_TIMEOUT", 10.0, lo=0.5),
        tape_size=env_int(env, "FIXLAB_TAPE_SIZE", 50, lo=1, hi=10_000),
        market_interval_s=env_float(env, "FIXLAB_MARKET_INTERVAL", 0.1, lo=0.0, hi=5.0),
        stall_s=env_int(env, "FIXLAB_WEB_STALL_S", 30, lo=1, hi=3600),
        certify=certify_settings(env),
        origins=_origins(env),
        schedule=parse_schedule(env.get("FIXLAB_SCHEDULE"), [i.symbol for i in common.instruments]),
    )


def _origins(env: Mapping[str, str]) -> frozenset[str]:
    raw = env_str(env, "FIXLAB_WEB_ORIGINS", "")
    try:
        return parse_origins(raw)
    except ValueError as exc:
        raise ConfigError(f"FIXLAB_WEB_ORIGINS: {exc}") from None
