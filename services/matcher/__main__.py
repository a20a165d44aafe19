"""``python -m services.matcher``: one matcher process for the shard FIXLAB_MATCHER_SHARD (default "0")."""

from __future__ import annotations

import logging
import signal
import sys
import threading

from services.matcher.config import load
from services.matcher.service import MatcherService, RecoveryError
from shared import gcpolicy, logs
from shared.bus import REDIS_ERRORS
from shared.config import ConfigError, redact_url
from shared.signals import stop_on_signals

log = logging.getLogger("services.matcher")


def main() -> int:
    logs.setup("matcher")
    try:
        settings = load()
        gc_policy = gcpolicy.policy()
    except ConfigError as exc:
        print(f"matcher: {exc}", file=sys.stderr)
        return 2
    stop = threading.Event()
    stop_on_signals(stop, lambda signum: log.info("signal %s: finishing the current batch",
                                                  signal.Signals(signum).name))
    log.info("matcher shard %s starting: %s, instruments %s", settings.shard, settings.common,
             ", ".join(i.symbol + (" (pro-rata)" if i.pro_rata else "") for i in settings.instruments))
    try:
        service = MatcherService(settings)
        gcpolicy.apply(gc_policy)
        service.run(stop)
    except RecoveryError as exc:
        log.error("cannot recover: %s", exc)
        return 3
    except REDIS_ERRORS as exc:
        log.error("redis unavailable at %s: %s", redact_url(settings.common.redis_url), exc)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
