"""Liveness and counters of every service instance, kept in Redis where the web and tools read them.

Each instance runs a ``HealthReporter``: every ``interval_s`` it writes a hash at
``streams.health_key(service, instance)`` with its counters and a TTL of three intervals, so a dead
instance disappears by itself. ``python -m shared.health SERVICE`` exits 0 when at least one
instance of SERVICE reported recently, ``python -m shared.health SERVICE INSTANCE`` when that one
did (the compose healthchecks; REDIS_URL may name a Redis Cluster's nodes).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import redis

from shared import redis_cluster, streams
from shared.bus import REDIS_ERRORS

log = logging.getLogger(__name__)

Counters = Callable[[], Mapping[str, int | float | str]]


class HealthReporter:
    def __init__(self, r: redis.Redis, service: str, instance: str, counters: Counters,
                 interval_s: float = 2.0) -> None:
        self.r = r
        self.key = streams.health_key(service, instance)
        self.service = service
        self.instance = instance
        self.counters = counters
        self.interval_s = interval_s
        self.started = time.time()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"health-{service}", daemon=True)

    def start(self) -> HealthReporter:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(self.interval_s + 1)
        with contextlib.suppress(*REDIS_ERRORS):
            self.r.delete(self.key)

    def report(self) -> None:
        fields: dict[str, int | float | str] = {
            "service": self.service, "instance": self.instance, "pid": os.getpid(),
            "started": round(self.started, 3), "at": round(time.time(), 3),
        }
        fields.update(self.counters())
        pipe = self.r.pipeline(transaction=True)
        pipe.hset(self.key, mapping=fields)  # type: ignore[arg-type]
        pipe.pexpire(self.key, int(self.interval_s * 3000))
        pipe.execute()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.report()
            except REDIS_ERRORS as exc:
                log.warning("health report failed: %s", exc)
            except Exception:  # a counters callback must never kill the service
                log.exception("health counters failed")
            self._stop.wait(self.interval_s)


def instances(r: redis.Redis) -> list[dict[str, str]]:
    """Every live instance's last report, decoded."""
    out = []
    for key in r.scan_iter(match=streams.health_key("*", "*"), count=100):
        raw: Any = r.hgetall(key)
        if raw:
            out.append({k.decode(): v.decode() for k, v in raw.items()})
    return sorted(out, key=lambda d: (d.get("service", ""), d.get("instance", "")))


def main(argv: list[str]) -> int:
    if len(argv) not in (1, 2):
        print("usage: python -m shared.health SERVICE [INSTANCE]", file=sys.stderr)
        return 2
    url = os.environ.get("REDIS_URL")
    if not url:
        print("REDIS_URL is not set", file=sys.stderr)
        return 2
    try:
        r: Any = redis_cluster.connect_any(url, timeout_s=2)
        if len(argv) == 2:  # one key: on a cluster, the node of its slot answers
            return 0 if r.exists(streams.health_key(argv[0], argv[1])) else 1
        live = [i for i in instances(r) if i["service"] == argv[0]]
    except (*REDIS_ERRORS, redis.exceptions.RedisClusterException) as exc:
        print(f"redis unavailable: {exc}", file=sys.stderr)
        return 1
    return 0 if live else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
