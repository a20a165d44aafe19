"""``python -m services.gateway``: run the FIX acceptor until SIGTERM or SIGINT."""

from __future__ import annotations

import logging
import os
import sys
import threading

from services.gateway.config import gateway_settings
from services.gateway.server import Gateway
from shared import gcpolicy, logs
from shared.bus import REDIS_ERRORS, connect, wait_for_redis
from shared.config import ConfigError
from shared.signals import stop_on_signals

log = logging.getLogger("services.gateway")


def main() -> int:
    logs.setup("gateway")
    try:
        settings = gateway_settings()
        gc_policy = gcpolicy.policy()
    except ConfigError as exc:
        print(f"gateway: {exc}", file=sys.stderr)
        return 2
    try:
        wait_for_redis(connect(settings.common.redis_url), timeout_s=30)
    except REDIS_ERRORS as exc:
        # Not fatal: the publisher and the events thread retry; orders wait in the publisher (bounded).
        log.warning("redis not answering yet (%s); starting anyway", exc)
    try:
        gateway = Gateway(settings)
    except ConfigError as exc:
        print(f"gateway: {exc}", file=sys.stderr)
        return 2
    stop = threading.Event()
    stop_on_signals(stop, lambda signum: log.info("signal %d: logging out every session", signum))
    try:
        gateway.start()
    except Exception as exc:  # e.g. the port is taken: one clear line, not a traceback
        print(f"gateway: cannot start the FIX acceptor on port {settings.fix_port}: {exc}", file=sys.stderr)
        return 1
    gcpolicy.apply(gc_policy)
    ranges = (f" (gateway {settings.gateway_index} of {settings.gateways}: {settings.comp_ids.summary()})"
              if settings.gateways > 1 else "")
    print(f"gateway {settings.gateway_id} ready on port {settings.fix_port}{ranges}", flush=True)
    while not stop.wait(1.0):
        pass
    gateway.stop()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    # Everything is flushed and every session logged out. Skip interpreter teardown: destroying
    # the SWIG-wrapped acceptor and its director Application in arbitrary order segfaults
    # (quickfix 1.16.0), which would turn a clean stop into exit code -11.
    os._exit(0)


if __name__ == "__main__":
    raise SystemExit(main())
