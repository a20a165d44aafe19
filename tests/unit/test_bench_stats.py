"""The bench's own arithmetic: nearest-rank percentiles, result merging, plans."""

from __future__ import annotations

import random

import pytest

from services.bench.plan import instance_share, split
from services.bench.stats import nearest_rank, summarize
from shared.schema import BenchResult, decode, encode


def test_nearest_rank_small_textbook_cases() -> None:
    # Wikipedia's nearest-rank example: 15, 20, 35, 40, 50.
    values = [15, 20, 35, 40, 50]
    assert nearest_rank(values, 5) == 15
    assert nearest_rank(values, 30) == 20
    assert nearest_rank(values, 40) == 20
    assert nearest_rank(values, 50) == 35
    assert nearest_rank(values, 100) == 50


def test_nearest_rank_exact_at_boundaries_without_float_drift() -> None:
    values = list(range(1, 101))  # 1..100
    assert nearest_rank(values, 99) == 99
    assert nearest_rank(values, 90) == 90
    assert nearest_rank(values, 50) == 50
    # 99% of 1,000 is rank 990 exactly; floats (0.99 * 1000 = 989.999...) would be off by one
    thousand = list(range(1, 1001))
    assert nearest_rank(thousand, 99) == 990
    assert nearest_rank(thousand, "99.9") == 999
    assert nearest_rank([7], 50) == 7


def test_nearest_rank_matches_definition_on_random_data() -> None:
    rng = random.Random(5)
    for _ in range(200):
        values = sorted(rng.randrange(1000) for _ in range(rng.randrange(1, 300)))
        p = rng.choice([1, 10, 50, 90, 99, 100])
        got = nearest_rank(values, p)
        # the smallest value with at least p% of values at or below it
        assert sum(v <= got for v in values) * 100 >= p * len(values)
        smaller = [v for v in values if v < got]
        assert not smaller or sum(v <= smaller[-1] for v in values) * 100 < p * len(values)


@pytest.mark.parametrize("p", [0, -1, 101])
def test_nearest_rank_rejects_bad_percentiles(p: int) -> None:
    with pytest.raises(ValueError):
        nearest_rank([1, 2], p)


def test_nearest_rank_of_nothing_is_an_error() -> None:
    with pytest.raises(ValueError):
        nearest_rank([], 50)


def _result(instance: int, latencies: list[int], *, start: int = 0, end: int = 1_000_000_000,
            rejected: int = 0, lost: int = 0, run_id: str = "r1", window: int = 4) -> BenchResult:
    acked = len(latencies)
    return BenchResult(run_id=run_id, instance=instance, sessions=2, window=window,
                       orders=acked + rejected + lost, sent=acked + rejected + lost, acknowledged=acked,
                       rejected=rejected, lost=lost, start_ns=start, end_ns=end,
                       latencies_ns=tuple(latencies))


def test_merge_uses_raw_latencies_not_percentiles() -> None:
    # Instance 0 is fast, instance 1 slow and bigger: averaging the p50s would give 50.5 us;
    # the p50 over every order is 100 us.
    fast = _result(0, [1_000] * 40)
    slow = _result(1, [100_000] * 60)
    summary, lat = summarize([fast, slow])
    assert summary.ack_p50_us == 100.0
    assert summary.ack_p90_us == 100.0
    assert lat == sorted(lat) and len(lat) == 100
    assert summary.acknowledged == 100 and summary.sessions == 4 and summary.instances == 2


def test_merge_rate_spans_earliest_start_to_latest_end() -> None:
    a = _result(0, [10] * 500, start=1_000_000_000, end=2_000_000_000)
    b = _result(1, [10] * 500, start=1_500_000_000, end=3_000_000_000)
    summary, _ = summarize([a, b])
    assert summary.seconds == 2.0
    assert summary.orders_per_s == 500.0


def test_merge_counts_rejected_and_lost() -> None:
    summary, _ = summarize([_result(0, [5_000, 6_000], rejected=3, lost=1), _result(1, [7_000], lost=2)])
    assert (summary.acknowledged, summary.rejected, summary.lost) == (3, 3, 3)
    assert summary.orders == 9 and summary.sent == 9
    assert summary.ack_max_us == 7.0
    # answered orders (acknowledged + rejected) over one second
    assert summary.orders_per_s == 6.0


def test_merge_refuses_mixed_runs_duplicates_and_inconsistent_counts() -> None:
    with pytest.raises(ValueError, match="different runs"):
        summarize([_result(0, [1]), _result(1, [1], run_id="other")])
    with pytest.raises(ValueError, match="repeat"):
        summarize([_result(0, [1]), _result(0, [1])])
    with pytest.raises(ValueError, match="windows"):
        summarize([_result(0, [1]), _result(1, [1], window=8)])
    bad = BenchResult("r1", 0, 1, 1, 2, 2, 2, 0, 0, 0, 1, (5,))
    with pytest.raises(ValueError, match="latencies"):
        summarize([bad])
    with pytest.raises(ValueError):
        summarize([])


def test_summary_has_the_names_other_tools_read() -> None:
    summary, _ = summarize([_result(0, [1_000, 2_000, 3_000])])
    record = summary.to_json()
    for name in ("sessions", "window", "orders", "acknowledged", "rejected", "lost", "orders_per_s",
                 "ack_p50_us", "ack_p90_us", "ack_p99_us", "ack_max_us"):
        assert name in record
    assert record["ack_max_us"] == 3.0 and record["ack_p50_us"] == 2.0


def test_bench_result_round_trips_through_the_codec() -> None:
    r = _result(3, [1, 2, 3_000_000_000])
    assert decode(encode(r)) == r


def test_split_and_instance_share() -> None:
    assert split(10, 3) == [4, 3, 3]
    assert sum(split(200_000, 8)) == 200_000
    # 8 sessions, 100 orders over 3 instances: sessions 3/3/2, orders by session 13*4 + 12*4
    shares = [instance_share(8, 100, 3, i) for i in range(3)]
    assert [s for s, _ in shares] == [3, 3, 2]
    assert sum(sum(q) for _, q in shares) == 100
    assert shares[0][1] == [13, 13, 13]
    with pytest.raises(ValueError):
        instance_share(2, 10, 3, 0)  # fewer sessions than instances
    with pytest.raises(ValueError):
        instance_share(4, 10, 2, 2)
    with pytest.raises(ValueError):
        split(5, 0)
