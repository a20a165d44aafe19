"""The CompIDs the exchange accepts out of the box (QuickFIX C++ has no dynamic acceptor sessions).

Every session is configured in the acceptor in advance, as a real exchange provisions its members'
CompIDs. A user adds more in a QuickFIX settings file (see the gateway's README section).

With several gateways (FIXLAB_GATEWAYS, deploy/SCALING.md section 3), each pool is cut into as many
contiguous ranges, and gateway ``k`` (1-based) accepts the ``k``-th range of every pool: a CompID
belongs to exactly one gateway, so its sequence numbers, its reports and the sweep of what a
previous run left resting have one owner. With one gateway its range is the whole pool.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

EXCHANGE_COMP_ID = "FIXLAB"
BEGIN_STRING = "FIX.4.4"

CLIENT_COMP_IDS = tuple(f"CLIENT{n:02d}" for n in range(1, 17))  # people's own FIX clients
# The bench: 224 FIX 4.4 sessions (256 before issue 25: the last 32 gave their memory to the FIX 4.2 and
# FIXT.1.1 pools below, which keeps the gateway within 200 MiB with every session configured).
BENCH_COMP_IDS = tuple(f"BENCH{n:03d}" for n in range(1, 225))
BOT_COMP_IDS = tuple(f"BOT{n:02d}" for n in range(1, 9))  # liquidity bots of the lab page
# Visitors' lab sessions, handed out in turn: 48 FIX 4.4 (64 before the page could choose a version:
# the last 16 became the FIX 4.2 and FIXT.1.1 lab pools below, within the same memory).
LAB_COMP_IDS = tuple(f"LAB{n:03d}" for n in range(1, 49))
# The other versions' sessions (shared.fix.versions; the pools above are FIX.4.4's): a client's own
# and the bench's, 8 each (every pool splits over up to MAX_GATEWAYS gateways).
CLIENT42_COMP_IDS = tuple(f"CLIENT42-{n:02d}" for n in range(1, 9))  # BeginString FIX.4.2
CLIENT50_COMP_IDS = tuple(f"CLIENT50-{n:02d}" for n in range(1, 9))  # FIXT.1.1, DefaultApplVerID 9
BENCH42_COMP_IDS = tuple(f"BENCH42-{n:03d}" for n in range(1, 9))
BENCH50_COMP_IDS = tuple(f"BENCH50-{n:03d}" for n in range(1, 9))
LAB42_COMP_IDS = tuple(f"LAB42-{n:02d}" for n in range(1, 9))  # the page's lab sessions in FIX 4.2
LAB50_COMP_IDS = tuple(f"LAB50-{n:02d}" for n in range(1, 9))  # and in FIX 5.0 SP2
# BeginString of each pool that is not FIX.4.4's.
POOL_BEGIN_STRINGS = {"clients42": "FIX.4.2", "bench42": "FIX.4.2", "labs42": "FIX.4.2",
                      "clients50": "FIXT.1.1", "bench50": "FIXT.1.1", "labs50": "FIXT.1.1"}

# Every gateway needs at least one CompID of the smallest pool (the bots').
MAX_GATEWAYS = len(BOT_COMP_IDS)


def part(pool: Sequence[str], index: int, count: int) -> tuple[str, ...]:
    """The ``index``-th (1-based) of ``count`` contiguous, near-equal ranges of ``pool``."""
    if not 1 <= index <= count <= len(pool):
        raise ValueError(f"range {index} of {count} of a pool of {len(pool)}")
    size, extra = divmod(len(pool), count)
    start = (index - 1) * size + min(index - 1, extra)
    return tuple(pool[start:start + size + (1 if index <= extra else 0)])


@dataclass(frozen=True, slots=True)
class GatewayCompIds:
    """The pooled CompIDs one gateway accepts."""

    clients: tuple[str, ...]
    bench: tuple[str, ...]
    bots: tuple[str, ...]
    labs: tuple[str, ...]
    clients42: tuple[str, ...] = ()
    clients50: tuple[str, ...] = ()
    bench42: tuple[str, ...] = ()
    bench50: tuple[str, ...] = ()
    labs42: tuple[str, ...] = ()
    labs50: tuple[str, ...] = ()

    def pools(self) -> tuple[tuple[str, ...], ...]:
        return (self.clients, self.bench, self.bots, self.labs, self.clients42, self.clients50,
                self.bench42, self.bench50, self.labs42, self.labs50)

    def lab_pools(self) -> dict[str, tuple[str, ...]]:
        """The lab CompIDs of each version (shared.fix.versions' names: "4.4", "4.2", "5.0SP2")."""
        return {"4.4": self.labs, "4.2": self.labs42, "5.0SP2": self.labs50}

    def __contains__(self, comp_id: object) -> bool:
        return any(comp_id in pool for pool in self.pools())

    def begin_string(self, comp_id: str) -> str:
        """The BeginString of a pooled CompID's session."""
        for name, begin in POOL_BEGIN_STRINGS.items():
            if comp_id in getattr(self, name):
                return begin
        return BEGIN_STRING

    def summary(self) -> str:
        """``CLIENT01-08, BENCH001-112, BOT01-04, LAB001-032`` (the FIX 4.4 pools)."""
        def span(pool: tuple[str, ...]) -> str:
            first, last = pool[0], pool[-1]
            digits = len(last) - len(last.rstrip("0123456789"))
            return first if first == last else f"{first}-{last[-digits:]}"
        return ", ".join(span(p) for p in (self.clients, self.bench, self.bots, self.labs))

    def versions_summary(self) -> str:
        """``CLIENT42-01-04, CLIENT50-01-04, BENCH42-001-004, BENCH50-001-004, ...``: FIX 4.2 and FIXT."""
        return ", ".join(f"{p[0]}..{p[-1]}" if len(p) > 1 else p[0]
                         for p in (self.clients42, self.clients50, self.bench42, self.bench50, self.labs42,
                                   self.labs50) if p)


def gateway_comp_ids(index: int = 1, count: int = 1) -> GatewayCompIds:
    """What gateway ``index`` of ``count`` accepts; gateway 1 of 1 accepts every pool whole."""
    if not 1 <= count <= MAX_GATEWAYS:
        raise ValueError(f"{count} gateways: 1 to {MAX_GATEWAYS}")
    return GatewayCompIds(part(CLIENT_COMP_IDS, index, count), part(BENCH_COMP_IDS, index, count),
                          part(BOT_COMP_IDS, index, count), part(LAB_COMP_IDS, index, count),
                          part(CLIENT42_COMP_IDS, index, count), part(CLIENT50_COMP_IDS, index, count),
                          part(BENCH42_COMP_IDS, index, count), part(BENCH50_COMP_IDS, index, count),
                          part(LAB42_COMP_IDS, index, count), part(LAB50_COMP_IDS, index, count))


def gateway_of(comp_id: str, count: int) -> int | None:
    """Which gateway (1-based) of ``count`` accepts the pooled ``comp_id``; None if no pool holds it."""
    for index in range(1, count + 1):
        if comp_id in gateway_comp_ids(index, count):
            return index
    return None


def bot_comp_ids(bots: int, count: int = 1) -> tuple[str, ...]:
    """The CompIDs of ``bots`` liquidity bots, dealt to the gateways in turn (BOT01, BOT05, BOT02 ...
    for two gateways), so every gateway carries a share of the quotes; one gateway: BOT01, BOT02 ..."""
    ranges = [gateway_comp_ids(k, count).bots for k in range(1, count + 1)]
    dealt = [pool[i] for i in range(max(map(len, ranges))) for pool in ranges if i < len(pool)]
    if bots > len(dealt):
        raise ValueError(f"{bots} bots: {len(dealt)} at most")
    return tuple(dealt[:bots])
