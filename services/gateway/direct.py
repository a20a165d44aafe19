"""The intake's shortcut at light load: a lone order goes on the bus from the engine thread itself.

The publisher process (publisher.py) exists for floods: there, any Python thread beside QuickFIX's
engine thread would take the GIL from it. But it costs every order a process wake-up and a second
pass through a pipe, which is most of what the exchange adds to a lone order's round trip beyond
Redis itself. So when an order arrives after a quiet spell (nothing received for ``idle_s``) and the
pipe holds nothing not yet on the bus (so nothing it carries can be overtaken), the engine thread
translates and publishes it at once, with the same straight line as the publisher
(services.gateway.intake.Publisher: translate -> group -> one MULTI/EXEC, a refusal as a Refused
event on the events stream) over a lean connection of its own with a short time-out. Under load the
next order arrives sooner than ``idle_s`` and takes the pipe, so the flood path is unchanged.

The engine thread waits for the write, so the shortcut only pays while writes are fast. A write
slower than ``slow_s`` (``FIXLAB_DIRECT_SLOW_US``; Redis with ``appendfsync always`` answers after
an fdatasync, milliseconds on a busy disk) would hold every session's traffic behind one order's
fsync, and each order of a closed-loop client would then find the engine "quiet" again and pay a
whole fsync on its own: the full stack did 490-630 orders/s at 4x8 and 648-731 at 8x32 with a test
run beside it, where the publisher's batches share one fsync among hundreds. So ``slow_run`` slow
writes in a row (3) rest the shortcut for ``pause_s`` as an error does, and the quiet spell is
counted from the end of the previous write, not from the previous order's arrival.

In a row, not one: on 2 cores shared by the bench, the gateway, its publisher, the matcher and
Redis, a write is now and then slower than 1 ms for no reason of Redis's (the writer was preempted,
an everysec fsync held the AOF write). With one slow write resting it, the shortcut was off most of
the time at 1x1 (378 of 3,100 orders took it, ``direct_slow`` 1, with ``appendfsync everysec``).
Under ``always`` every write is slow, so the rule still rests it after three: three fsyncs on the
engine thread every ``pause_s``.

On a Redis error the order goes to the pipe instead, and the shortcut rests for ``pause_s``. When
the error left the outcome unknown (a time-out after the write), the command may reach the matcher
twice: the matcher drops a redelivery (same session, ClOrdID and MsgSeqNum), so the order is not
doubled; a refused order could be answered twice.
"""

from __future__ import annotations

import time

from services.gateway.intake import Publisher


class DirectIntake:
    """Engine-thread only: ``quiet`` for every order, then ``publish`` for the ones that may go."""

    def __init__(self, publisher: Publisher, *, idle_s: float, pause_s: float = 2.0,
                 slow_s: float = 0.001, slow_run: int = 3) -> None:
        self.publisher = publisher
        self.idle_s = idle_s
        self.pause_s = pause_s
        self.slow_s = slow_s
        self.slow_run = slow_run  # this many slow writes in a row rest the shortcut
        self._slow_in_a_row = 0
        self.published = 0  # orders that took the shortcut
        self.fallbacks = 0  # orders that tried it and went to the pipe after a Redis error
        self.slow = 0  # shortcut writes that took longer than slow_s (slow_run in a row rest it for pause_s)
        self._last = float("-inf")  # when the previous order arrived (monotonic)
        self._paused_until = float("-inf")

    def quiet(self, now: float) -> bool:
        """Note an order's arrival; True when nothing arrived for ``idle_s`` before it."""
        last, self._last = self._last, now
        return now - last >= self.idle_s and now >= self._paused_until

    def publish(self, raw: str) -> bool:
        """Put one received message on the bus now; False: it must take the pipe."""
        started = time.monotonic()
        if self.publisher.publish([(raw, time.time_ns())], None):
            self.published += 1
            self._last = ended = time.monotonic()
            if ended - started > self.slow_s:
                self.slow += 1
                self._slow_in_a_row += 1
                if self._slow_in_a_row >= self.slow_run:
                    self._slow_in_a_row = 0
                    self._paused_until = ended + self.pause_s
            else:
                self._slow_in_a_row = 0
            return True
        self.publisher.forget()
        self.fallbacks += 1
        self._last = time.monotonic()
        self._paused_until = self._last + self.pause_s
        return False
