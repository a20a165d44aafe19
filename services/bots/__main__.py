"""``python -m services.bots``: liquidity bots, ordinary QuickFIX initiator sessions of the exchange.

FIXLAB_BOTS sessions (BOT01.., default 2, 0 turns them off) connect to 127.0.0.1:FIXLAB_FIX_PORT (with
FIXLAB_GATEWAYS=N, each to the gateway whose CompID range holds it: config.py) and
quote a small ladder around each reference price (services.bots.quoter), so the books are never empty.
"""

from __future__ import annotations

import logging
import os
import sys
import threading

import quickfix as fix

from services.bots.config import bot_settings, session_settings
from services.bots.quoter import Bots
from shared import gcpolicy, logs
from shared.bus import connect
from shared.config import ConfigError
from shared.health import HealthReporter
from shared.signals import stop_on_signals

log = logging.getLogger("bots")


def main() -> int:
    logs.setup("bots")
    try:
        s = bot_settings()
        gc_policy = gcpolicy.policy()
    except ConfigError as exc:
        print(f"bots: {exc}", file=sys.stderr)
        return 2
    stop = threading.Event()
    stop_on_signals(stop)
    if s.bots == 0:
        log.info("FIXLAB_BOTS=0: no liquidity bots")
        # Still reported, with no sessions: compose's healthcheck (`python -m shared.health bots`)
        # waits for this report, and `docker compose up --wait` with FIXLAB_BOTS=0 failed on
        # "container fixlab-bots-1 is unhealthy" without it.
        idle = HealthReporter(connect(s.common.redis_url), "bots", str(os.getpid()),
                              lambda: {"sessions": 0, "logged_on": 0, "resting": 0}).start()
        stop.wait()
        idle.stop()
        return 0
    app = Bots(s)
    initiator = fix.SocketInitiator(app, fix.MemoryStoreFactory(), session_settings(s))
    reporter = HealthReporter(connect(s.common.redis_url), "bots", str(os.getpid()), app.health).start()
    initiator.start()
    gcpolicy.apply(gc_policy)
    log.info("%d bots connecting: %s", s.bots,
             ", ".join(f"{c} to {':'.join(map(str, s.address(c)))}" for c in s.comp_ids))
    try:
        app.work(stop)
    finally:
        initiator.stop()  # Logout: the exchange cancels the bots' resting orders
        reporter.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
