"""Pro-rata allocation of one aggressor across the orders resting at one price level.

The rule is seed 003's (orderbook-fix, docs/pro_rata.md): with leaves ``q_1..q_n`` in time order
and ``T = sum(q)``, fill ``to_fill = min(A, T)``; each order first gets ``floor(to_fill * q_i / T)``
(``T`` is taken once, before any fill); the rounding residual then goes in time order to the orders
that still have room. 500 against 100/200/300 gives 84/166/250.
"""

from __future__ import annotations

from collections.abc import Sequence


def allocate(aggressor_qty: int, leaves: Sequence[int]) -> list[int]:
    """Return each resting order's fill, in the order given (oldest first)."""
    total = sum(leaves)
    if aggressor_qty <= 0 or total <= 0:
        return [0] * len(leaves)
    to_fill = aggressor_qty if aggressor_qty < total else total
    if to_fill == total:
        return list(leaves)
    fills = [to_fill * q // total for q in leaves]
    residual = to_fill - sum(fills)
    i = 0
    # The residual is below len(leaves) (each floor loses less than one unit), so one pass suffices.
    while residual > 0:
        room = leaves[i] - fills[i]
        if room > 0:
            take = room if room < residual else residual
            fills[i] += take
            residual -= take
        i += 1
    return fills
