"""One session's orders in one phase: at most ``window`` unanswered, ``quota`` in all.

Pure and clock-free (times come in as arguments), so windowing and lost-order accounting are
tested without an engine. Not thread-safe by itself: the session driver holds a lock around it.
"""

from __future__ import annotations

from array import array


class OrderWindow:
    """Hands out order numbers ``base .. base+quota-1`` and records how each was answered."""

    __slots__ = ("_answered", "_sent_ns", "acknowledged", "answered", "base", "duplicates",
                 "latencies_ns", "quota", "rejected", "sent", "unknown", "window")

    def __init__(self, quota: int, window: int, base: int = 0) -> None:
        if quota < 0 or window < 1:
            raise ValueError(f"quota must be >= 0 and window >= 1 (got {quota}, {window})")
        self.quota = quota
        self.window = window
        self.base = base
        self.sent = 0
        self.answered = 0
        self.acknowledged = 0
        self.rejected = 0
        self.duplicates = 0  # a second answer for one order: the exchange's fault, counted, not re-timed
        self.unknown = 0  # an answer for a number this window never sent
        self._sent_ns = array("q", bytes(8 * quota))
        self._answered = bytearray(quota)
        self.latencies_ns = array("q")

    @property
    def in_flight(self) -> int:
        return self.sent - self.answered

    @property
    def lost(self) -> int:
        """Sent and not (yet) answered: once the phase is over, these are lost."""
        return self.sent - self.answered

    @property
    def done(self) -> bool:
        return self.sent == self.quota and self.answered == self.sent

    def owns(self, number: int) -> bool:
        return self.base <= number < self.base + self.quota

    def take(self) -> int | None:
        """Return the next order number to send, or None when the window is full or the quota is
        spent. Stamp it (``stamp``) just before handing it to the engine."""
        if self.sent >= self.quota or self.sent - self.answered >= self.window:
            return None
        i = self.sent
        self.sent = i + 1
        return self.base + i

    def stamp(self, number: int, now_ns: int) -> None:
        """Record when order ``number`` went to the engine (before its answer can exist)."""
        self._sent_ns[number - self.base] = now_ns

    def answer(self, number: int, now_ns: int, accepted: bool) -> bool:
        """Record the answer to order ``number``; True when it was the first answer to a sent order."""
        i = number - self.base
        if i < 0 or i >= self.sent:
            self.unknown += 1
            return False
        if self._answered[i]:
            self.duplicates += 1
            return False
        self._answered[i] = 1
        self.answered += 1
        if accepted:
            self.acknowledged += 1
            self.latencies_ns.append(now_ns - self._sent_ns[i])
        else:
            self.rejected += 1
        return True
