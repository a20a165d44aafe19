"""The schedule's driver: a SetPhase for each instrument whose scheduled phase (shared.schedule) differs
from the one it last sent, at start-up and at every change of the schedule.

Beside the end of day (endofday.py), for the same reason: the matcher reads no clock, the gateway
does. Every gateway sends them; SetPhase is idempotent in the matcher, so several gateways, or one
restarted, change nothing twice. Between two changes of the schedule, what the operator did by hand
(``fixlab admin halt``) stands: the driver sends only when the schedule itself moves on.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from shared.clock import now_ns
from shared.schedule import Schedule
from shared.schema import PHASE_NAMES, SetPhase

log = logging.getLogger(__name__)

TICK_S = 0.5  # how often the schedule is looked at (a demo day's changes come seconds apart)


class PhaseDriver:
    """A thread that hands ``send`` the SetPhase commands ``schedule`` calls for."""

    def __init__(self, schedule: Schedule, send: Callable[[SetPhase], None],
                 clock: Callable[[], int] = now_ns) -> None:
        self.schedule = schedule
        self.send = send
        self.clock = clock
        self.sent: dict[str, int] = {}  # symbol -> the scheduled phase last sent
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def tick(self) -> list[SetPhase]:
        """Send what the schedule says now and was not sent yet; the commands sent."""
        ts = self.clock()
        out = []
        for symbol, phase in self.schedule.phases_at(ts).items():
            if self.sent.get(symbol) == phase:
                continue
            cmd = SetPhase(symbol, phase, f"schedule {self.schedule.name}", ts)
            self.send(cmd)
            self.sent[symbol] = phase
            out.append(cmd)
            log.info("schedule: %s -> %s", symbol, PHASE_NAMES[phase])
        return out

    def start(self) -> PhaseDriver:
        self.tick()  # on this thread: before the acceptor takes its first order
        self._thread = threading.Thread(target=self._run, name="phase-driver", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(TICK_S):
            try:
                self.tick()
            except Exception:  # the next tick tries again; the gateway stays up
                log.exception("cannot hand over the schedule's phases")

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2.0)
