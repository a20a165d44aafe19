"""Exact statistics over every measured order: nearest-rank percentiles and merged run summaries."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from fractions import Fraction
from typing import Any

from shared.schema import BenchResult

PERCENTILES = (50, 90, 99)


def nearest_rank(sorted_values: Sequence[int], p: float | int | str) -> int:
    """Return the ``p``-th percentile by the nearest-rank method: the smallest value such that at
    least p% of the values are at or below it (rank = ceil(p/100 * n)), exactly, with no interpolation.
    """
    if not sorted_values:
        raise ValueError("no values: a percentile of nothing is undefined")
    q = Fraction(str(p))
    if not 0 < q <= 100:
        raise ValueError(f"percentile {p} is not in (0, 100]")
    n = len(sorted_values)
    rank = -(-q * n // 100)  # ceil without floats
    return sorted_values[max(int(rank), 1) - 1]


@dataclass(frozen=True, slots=True)
class Summary:
    """What other tools read from ``--out`` (these names exactly)."""

    sessions: int
    window: int
    orders: int
    sent: int
    acknowledged: int
    rejected: int
    lost: int
    instances: int
    seconds: float
    orders_per_s: float
    ack_p50_us: float
    ack_p90_us: float
    ack_p99_us: float
    ack_max_us: float
    start_ns: int = 0  # the measured phase on the wall clock (earliest start, latest end)
    end_ns: int = 0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _us(ns: int) -> float:
    return round(ns / 1000, 1)


def summarize(results: Iterable[BenchResult]) -> tuple[Summary, list[int]]:
    """Merge instances' raw results into one summary (and the sorted latencies, in ns).

    Percentiles come from the union of every instance's latencies, never from averaging
    percentiles; the rate is every answered order over the span from the earliest start to the
    latest end (wall clock, shared by the instances of one machine).
    """
    parts = list(results)
    if not parts:
        raise ValueError("no bench results to merge")
    run_ids = {p.run_id for p in parts}
    if len(run_ids) != 1:
        raise ValueError(f"results of different runs cannot merge: {sorted(run_ids)}")
    instances = [p.instance for p in parts]
    if len(set(instances)) != len(instances):
        raise ValueError(f"instance numbers repeat: {sorted(instances)}")
    windows = {p.window for p in parts}
    if len(windows) != 1:
        raise ValueError(f"instances ran with different windows: {sorted(windows)}")
    lat = sorted(x for p in parts for x in p.latencies_ns)
    acked = sum(p.acknowledged for p in parts)
    if acked != len(lat):
        raise ValueError(f"{acked} acknowledged but {len(lat)} latencies recorded")
    rejected = sum(p.rejected for p in parts)
    start_ns, end_ns = min(p.start_ns for p in parts), max(p.end_ns for p in parts)
    span_ns = end_ns - start_ns
    seconds = span_ns / 1e9 if span_ns > 0 else 0.0
    rate = (acked + rejected) / seconds if seconds > 0 else 0.0
    pct = [_us(nearest_rank(lat, p)) if lat else 0.0 for p in PERCENTILES]
    summary = Summary(
        sessions=sum(p.sessions for p in parts),
        window=windows.pop(),
        orders=sum(p.orders for p in parts),
        sent=sum(p.sent for p in parts),
        acknowledged=acked,
        rejected=rejected,
        lost=sum(p.lost for p in parts),
        instances=len(parts),
        seconds=round(seconds, 3),
        orders_per_s=round(rate, 1),
        ack_p50_us=pct[0],
        ack_p90_us=pct[1],
        ack_p99_us=pct[2],
        ack_max_us=_us(lat[-1]) if lat else 0.0,
        start_ns=start_ns,
        end_ns=end_ns,
    )
    return summary, lat
