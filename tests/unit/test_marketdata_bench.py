"""Issue 14's bench figures: orders/s with market-data subscribers over without, in one suite run, and
the X messages per second the subscribers received during the measured phase."""

from __future__ import annotations

from typing import Any

from services.bench import report
from services.bench.mdsubs import BUCKET_NS, x_per_second
from services.bench.suite import md_targets


def rec(rate: float, **extra: Any) -> dict[str, Any]:
    return {"sessions": 4, "window": 8, "orders": 1000, "acknowledged": 1000, "rejected": 0, "lost": 0,
            "orders_per_s": rate, "ack_p50_us": 900, "ack_p90_us": 1500, "ack_p99_us": 3000,
            "ack_max_us": 9000, **extra}


def test_the_ratio_target_is_met_at_ninety_percent_and_every_subscriber_must_be_served() -> None:
    served = {"market_data": {"x_per_s": 320.0, "session_rejects_sent": 0, "snapshots": 64, "by_type": {}}}
    runs = [{"name": "concurrent", "exchange": rec(4000), "md": rec(3600, **served)},
            {"name": "throughput", "exchange": rec(5000), "md": rec(4400, **served)},
            {"name": "latency", "exchange": rec(1000)}]
    got = [(t["run"], t["met"]) for t in md_targets(runs)]
    assert got == [("concurrent", True), ("concurrent", True), ("throughput", False), ("throughput", True)]
    rejected = {"market_data": {"x_per_s": 1.0, "session_rejects_sent": 3, "snapshots": 64}}
    assert [t["met"] for t in md_targets([{"name": "c", "exchange": rec(10), "md": rec(10, **rejected)}])] \
        == [True, False]


def test_x_per_second_counts_whole_buckets_inside_the_phase() -> None:
    start = 10 * BUCKET_NS + 1  # the first whole bucket is 11
    got = {"x_buckets": [[10, 500], [11, 32], [12, 32], [13, 64], [14, 999]]}
    assert x_per_second(got, start, 14 * BUCKET_NS) == (32 + 32 + 64) / 0.3
    assert x_per_second(got, start, start) == 0.0


def test_the_results_page_shows_the_market_data_runs() -> None:
    doc = {"machine": {"cpu_model": "x", "logical_cpus": 2, "memory_gib": 4, "kernel": "k",
                       "load_average_at_start": [0.1]},
           "versions": {"python": "3.11", "quickfix": "1.16.0", "redis_server": "7"},
           "date": "d", "command": "c",
           "runs": [{"name": "concurrent", "sessions": 4, "window": 8, "exchange": rec(4000),
                     "md": rec(3800, market_data={"x_per_s": 320, "x_entries": 900,
                                                  "session_rejects_sent": 0})}]}
    page = report.markdown(doc)
    assert "## Market data" in page
    assert "| concurrent | x0.95 | n/a | n/a | 320 | 900 | 0 |" in page
    doc["runs"][0]["exchange"]["cpu"] = {"exchange_us_per_order": 200.0, "us_per_order": {"gateway": 100.0},
                                         "cores": {"gateway": 0.4}}
    doc["runs"][0]["md"]["cpu"] = {"exchange_us_per_order": 210.0, "us_per_order": {"gateway": 108.0},
                                   "cores": {"gateway": 0.43}}
    assert "| concurrent | x0.95 | x1.05 | +8 | 320 | 900 | 0 |" in report.markdown(doc)
