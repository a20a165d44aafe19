"""How a run's totals divide between bench processes and their sessions, and where each session goes
(pure)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from shared.compids import BENCH_COMP_IDS, gateway_comp_ids, gateway_of

Address = tuple[str, int]


def split(total: int, parts: int) -> list[int]:
    """``total`` in ``parts`` shares differing by at most one, larger shares first."""
    if parts < 1 or total < 0:
        raise ValueError(f"cannot split {total} into {parts} parts")
    q, r = divmod(total, parts)
    return [q + 1 if i < r else q for i in range(parts)]


def instance_share(total_sessions: int, total_orders: int, instances: int,
                   instance: int) -> tuple[int, list[int]]:
    """This instance's session count and the measured orders of each of its sessions.

    Orders are divided by session over the whole run, so the same totals measure the same load
    whether one process or several run it.
    """
    if not 0 <= instance < instances:
        raise ValueError(f"instance {instance} is not in 0..{instances - 1}")
    if total_sessions < instances:
        raise ValueError(f"{total_sessions} sessions cannot be shared by {instances} instances")
    sessions = split(total_sessions, instances)
    first = sum(sessions[:instance])
    per_session = split(total_orders, total_sessions)
    return sessions[instance], per_session[first:first + sessions[instance]]


# The BENCH pool of each FIX version (shared.compids, shared.fix.versions): BENCH001.., BENCH42-001..,
# BENCH50-001.. (FIXT.1.1 / FIX 5.0 SP2).
BENCH_POOLS = {"4.4": "bench", "4.2": "bench42", "5.0SP2": "bench50"}


def bench_pool(gateways: int, fix_version: str = "4.4") -> tuple[str, ...]:
    """The BENCH CompIDs (of ``fix_version``'s pool) in the order a run takes them: dealt over the
    gateways' ranges in turn (BENCH001, BENCH113, BENCH002 ... for two), so any number of sessions
    spreads evenly over the gateways; with one gateway, the pool as it is."""
    pool = BENCH_POOLS[fix_version]
    ranges = [getattr(gateway_comp_ids(k, gateways), pool) for k in range(1, gateways + 1)]
    return tuple(r[i] for i in range(max(map(len, ranges))) for r in ranges if i < len(r))


def gateway_addresses(addresses: Sequence[Address], gateways: int) -> tuple[Address, ...]:
    """Gateway k's address for k = 1..``gateways``: the k-th of ``addresses``, or, given one address,
    the runner's layout (its host, its port + k - 1: services/stack.py)."""
    if gateways < 1 or not addresses:
        raise ValueError(f"{gateways} gateways at {len(addresses)} addresses")
    if len(addresses) == gateways:
        return tuple(addresses)
    if len(addresses) == 1:
        host, port = addresses[0]
        if port + gateways - 1 > 65535:
            raise ValueError(f"{gateways} gateways from port {port} run past 65535")
        return tuple((host, port + k) for k in range(gateways))
    raise ValueError(f"{len(addresses)} addresses for {gateways} gateways: give one (the first "
                     "gateway's, the next ones on the following ports) or one per gateway")


@dataclass(frozen=True, slots=True)
class SessionPlan:
    """One bench session: its CompID, the gateway that accepts it, and what it orders."""

    comp_id: str
    host: str
    port: int
    symbol: str
    price: str


def session_plans(comp_ids: Sequence[str], addresses: Sequence[Address],
                  instruments: Sequence[tuple[str, str]], fix_version: str = "4.4") -> list[SessionPlan]:
    """Each CompID at the address of the gateway whose range holds it (``addresses[k-1]`` is gateway
    k's), ordering ``instruments[(n - 1) % len]`` where n is its number in the BENCH pool: sessions
    alternate instruments, and with two gateways each gateway still gets every instrument."""
    if not instruments:
        raise ValueError("no instrument to order")
    out = []
    pool = BENCH_COMP_IDS if fix_version == "4.4" else bench_pool(1, fix_version)
    for comp_id in comp_ids:
        index = gateway_of(comp_id, len(addresses))
        if index is None or comp_id not in pool:
            raise ValueError(f"{comp_id} is not a BENCH CompID of FIX {fix_version}")
        symbol, price = instruments[pool.index(comp_id) % len(instruments)]
        host, port = addresses[index - 1]
        out.append(SessionPlan(comp_id, host, port, symbol, price))
    return out
