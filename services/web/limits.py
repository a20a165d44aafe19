"""The page limits as plain classes: a token bucket for orders and a page counter per address."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass


@dataclass(slots=True)
class TokenBucket:
    """``burst`` at once, then ``rate`` per second. Time comes in from the caller (seconds)."""

    burst: int
    rate: float
    tokens: float = -1.0
    last: float = 0.0

    def __post_init__(self) -> None:
        if self.tokens < 0:
            self.tokens = float(self.burst)

    def take(self, now: float) -> float:
        """Take a token: return 0.0 when allowed, else the seconds until one is available."""
        if now > self.last:
            self.tokens = min(float(self.burst), self.tokens + (now - self.last) * self.rate)
            self.last = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return 0.0
        return (1.0 - self.tokens) / self.rate


class PageLimiter:
    """Count open pages per address and in total; ``admit`` refuses with the reason."""

    def __init__(self, per_address: int, total: int) -> None:
        self.per_address = per_address
        self.total = total
        self.by_address: Counter[str] = Counter()

    @property
    def open_pages(self) -> int:
        return sum(self.by_address.values())

    def admit(self, address: str) -> str | None:
        """Count a new page in; return None when admitted, else a message for the visitor."""
        if self.open_pages >= self.total:
            return (f"The lab is full: {self.total} pages are open across the site. "
                    "Try again in a few minutes.")
        if self.by_address[address] >= self.per_address:
            return (f"You already have {self.per_address} lab pages open from your address "
                    f"(the limit is {self.per_address}). Close one and reload.")
        self.by_address[address] += 1
        return None

    def release(self, address: str) -> None:
        self.by_address[address] -= 1
        if self.by_address[address] <= 0:
            del self.by_address[address]
