"""One matcher process per shard: a lease in Redis, held with a TTL and renewed while alive.

Two processes consuming the same shard would each apply part of the orders stream and diverge, so
a second one waits until the lease is free. A holder that was killed on this host (kill -9, OOM)
is recognised by its pid and replaced at once instead of after the TTL. A holder that cannot renew
in time must stop writing: ``on_lost`` is called and the service exits.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import redis

from shared.bus import REDIS_ERRORS

log = logging.getLogger(__name__)

_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""
_TAKE_OVER = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return 1
end
return 0
"""
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


def _dead_here(holder: str, host: str) -> bool:
    """True when ``holder`` ("host:pid") names a process of this host that no longer exists."""
    holder_host, _, pid = holder.rpartition(":")
    if holder_host != host or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


class Lease:
    def __init__(self, r: redis.Redis, key: str, *, ttl_s: float = 6.0, holder: str | None = None) -> None:
        self.r = r
        self.key = key
        self.ttl_ms = int(ttl_s * 1000)
        self.host = socket.gethostname()
        self.holder = holder or f"{self.host}:{os.getpid()}"
        self.attempts = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def try_acquire(self) -> str | None:
        """Take the lease if it is free (or its holder died on this host); else return the holder."""
        self.attempts += 1
        if self.r.set(self.key, self.holder, nx=True, px=self.ttl_ms):
            return None
        raw: Any = self.r.get(self.key)
        current = raw.decode() if raw is not None else ""
        if current == self.holder:
            return None
        if (current and _dead_here(current, self.host)
                and self.r.eval(_TAKE_OVER, 1, self.key, current, self.holder, self.ttl_ms)):
            log.warning("took over %s from %s, which is no longer running", self.key, current)
            return None
        return current or "(just released)"

    def acquire(self, stop: threading.Event, poll_s: float = 0.2) -> bool:
        """Wait for the lease; False when ``stop`` is set first."""
        told = False
        while not stop.is_set():
            try:
                holder = self.try_acquire()
            except REDIS_ERRORS as exc:
                log.warning("redis unavailable while taking %s: %s", self.key, exc)
                holder = "?"
            if holder is None:
                return True
            if not told:
                log.warning("%s is held by %s: waiting (one matcher per shard)", self.key, holder)
                told = True
            stop.wait(poll_s)
        return False

    def keep(self, on_lost: Callable[[str], None]) -> None:
        """Renew in the background every third of the TTL; call ``on_lost`` if the lease is gone."""
        def renew() -> None:
            last_ok = time.monotonic()
            while not self._stop.wait(self.ttl_ms / 3000):
                try:
                    if not self.r.eval(_RENEW, 1, self.key, self.holder, self.ttl_ms):
                        on_lost(f"{self.key} is no longer held by {self.holder}")
                        return
                    last_ok = time.monotonic()
                except REDIS_ERRORS as exc:
                    if time.monotonic() - last_ok > self.ttl_ms / 1000:
                        on_lost(f"could not renew {self.key} within its TTL: {exc}")
                        return

        self._thread = threading.Thread(target=renew, name="matcher-lease", daemon=True)
        self._thread.start()

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        try:
            self.r.eval(_RELEASE, 1, self.key, self.holder)
        except REDIS_ERRORS as exc:
            log.warning("could not release %s (it expires by itself): %s", self.key, exc)
