"""The end of the trading day: an EndOfDay to every shard at FIXLAB_END_OF_DAY (UTC) each day.

Day orders end there (the matcher cancels them); GTC orders rest on. The matcher reads no clock,
so the gateway, which does, says when a day is over. Every gateway sends it, and again at each
start for the latest day that ended (it may have been down then): the matcher acts once per day.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
from collections.abc import Callable

from shared.clock import now_ns
from shared.schema import EndOfDay

log = logging.getLogger(__name__)

UTC = dt.UTC
# Wake at least this often while waiting for the boundary: the wall clock may be stepped meanwhile.
MAX_WAIT_S = 60.0


def latest_boundary(now: dt.datetime, at: dt.time) -> dt.datetime:
    """The last end of day at or before ``now`` (both UTC)."""
    today = dt.datetime.combine(now.date(), at, tzinfo=UTC)
    return today if today <= now else today - dt.timedelta(days=1)


def day_number(boundary: dt.datetime) -> int:
    """The trading day a boundary ends, as YYYYMMDD."""
    return boundary.year * 10000 + boundary.month * 100 + boundary.day


class EndOfDayClock:
    """A thread that hands ``send`` an EndOfDay at start-up and at every boundary after it."""

    def __init__(self, at: dt.time, send: Callable[[EndOfDay], None],
                 clock: Callable[[], int] = now_ns) -> None:
        self.at = at
        self.send = send
        self.clock = clock
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.done = 0  # the last day sent

    def _now(self) -> dt.datetime:
        return dt.datetime.fromtimestamp(self.clock() / 1e9, UTC)

    def tick(self) -> bool:
        """Send the latest day that ended, unless already sent; True when one was sent."""
        day = day_number(latest_boundary(self._now(), self.at))
        if day <= self.done:
            return False
        self.send(EndOfDay(day, self.clock()))
        self.done = day
        log.info("end of day %d handed to the matchers (Day orders end)", day)
        return True

    def start(self) -> EndOfDayClock:
        self.tick()  # on this thread: before the acceptor takes its first order
        self._thread = threading.Thread(target=self._run, name="end-of-day", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while True:
            now = self._now()
            upcoming = latest_boundary(now, self.at) + dt.timedelta(days=1)
            if self._stop.wait(min(MAX_WAIT_S, max(0.0, (upcoming - now).total_seconds()))):
                return
            try:
                self.tick()
            except Exception:  # the next tick tries again; the gateway stays up
                log.exception("cannot hand over the end of day")

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2.0)
