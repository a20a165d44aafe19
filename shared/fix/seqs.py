"""An exchange engine's next sequence numbers, followed from the wire a tap forwards: pure.

The exchange runs in another process (the gateway's acceptor), so the lab cannot ask its engine;
it reads them off the messages instead, as the engine itself counts them: a message above the
expected number is queued until the gap is filled (by a resend or a SequenceReset-GapFill).
"""

from __future__ import annotations

from shared.fix.codec import field


def _int(value: str | None) -> int | None:
    if value is None or not value.isdigit():
        return None
    return int(value)


class ExchangeSeqs:
    """The exchange's next MsgSeqNum to send and to expect, from the messages the tap forwarded."""

    def __init__(self) -> None:
        self.next_sender = 1  # the next MsgSeqNum the exchange sends
        self.next_target = 1  # the next MsgSeqNum the exchange expects from the client
        self._queued: set[int] = set()

    def exchange_sent(self, raw: bytes) -> None:
        """Follow a message the exchange sent."""
        seq = _int(field(raw, 34))
        if seq is None:
            return
        msg_type = field(raw, 35)
        if msg_type == "A" and field(raw, 141) == "Y":
            self.next_sender = seq + 1
        elif msg_type == "4" and field(raw, 123) != "Y":
            new = _int(field(raw, 36))
            if new is not None:
                self.next_sender = new
        elif field(raw, 43) != "Y":
            self.next_sender = max(self.next_sender, seq + 1)

    def client_delivered(self, raw: bytes) -> None:
        """Follow a message the client sent that reached the exchange (not withheld)."""
        seq = _int(field(raw, 34))
        if seq is None:
            return
        msg_type = field(raw, 35)
        if msg_type == "A" and field(raw, 141) == "Y":
            self._queued.clear()
            self.next_target = seq + 1
        elif msg_type == "4" and (seq <= self.next_target or field(raw, 123) != "Y"):
            new = _int(field(raw, 36))
            if new is not None and new > self.next_target:
                self.next_target = new
        elif seq == self.next_target:
            self.next_target += 1
        elif seq > self.next_target:
            self._queued.add(seq)
            return
        else:
            return
        self._queued = {s for s in self._queued if s >= self.next_target}
        while self.next_target in self._queued:
            self._queued.discard(self.next_target)
            self.next_target += 1
