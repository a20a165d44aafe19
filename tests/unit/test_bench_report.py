"""The suite's outputs: number formats, the Markdown table, the SVG, the target checks."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

from services.bench import report
from services.bench.suite import _flatten, targets


def rec(orders: int, rate: float, p50: float, p99: float, *, lost: int = 0) -> dict[str, Any]:
    return {"sessions": 4, "window": 8, "orders": orders, "acknowledged": orders - lost, "rejected": 0,
            "lost": lost, "orders_per_s": rate, "ack_p50_us": p50, "ack_p90_us": p50 * 2,
            "ack_p99_us": p99, "ack_max_us": p99 * 3}


def test_latency_formats_follow_seed_000() -> None:
    assert report.fmt_us(333.4) == "333 µs"
    assert report.fmt_us(6_000) == "6.0 ms"
    assert report.fmt_us(131_000) == "131 ms"
    assert report.fmt_us(1_010_000) == "1.01 s"
    assert report.fmt_int(4523.4) == "4,523"
    assert report.ratio(10, 4) == "x2.50" and report.ratio(1, 0) == "n/a"


def doc(runs: list[dict[str, Any]]) -> dict[str, Any]:
    return {"machine": {"cpu_model": "CPU", "logical_cpus": 2, "memory_gib": 8, "kernel": "Linux 6",
                        "load_average_at_start": [0.1, 0.2, 0.3]},
            "versions": {"python": "3.11", "quickfix": "1.16.0", "redis_server": "7.0"},
            "date": "2026-12-02T00:00:00Z", "command": "make bench", "runs": runs,
            "targets": targets(runs), "components": {"matcher": {"status": "not available"}}}


def test_markdown_has_both_tables_the_ratio_and_the_targets() -> None:
    runs = [{"name": "concurrent", "exchange": rec(100_000, 5_000, 6_000, 20_000),
             "baseline": rec(100_000, 10_000, 3_000, 8_000), "svg": "concurrent.svg"}]
    text = report.markdown(doc(runs))
    assert ("| concurrent | 4 | 8 | 100,000 | 100,000 | 0 | 0 | 5,000 | 6.0 ms | 12 ms | 20 ms | 60 ms |"
            in text)
    assert "| concurrent | 4 | 8 | 100,000 | 100,000 | 0 | 0 | 10,000 | 3.0 ms |" in text
    assert "| concurrent | x0.50 | x2.00 | x2.50 |" in text
    assert "concurrent: >= 4,523 orders/s: 5,000 — met" in text
    assert "matcher: not available" in text and "[concurrent](concurrent.svg)" in text
    assert "sending the exchange's Fills too" not in text  # no such run, no such table


def test_the_engine_with_fills_has_its_own_table() -> None:
    runs = [{"name": "concurrent", "exchange": rec(100_000, 5_000, 6_000, 20_000),
             "baseline": rec(100_000, 10_000, 3_000, 8_000), "fills": rec(100_000, 6_500, 4_000, 9_000)}]
    text = report.markdown(doc(runs))
    table = text.split("sending the exchange's Fills too", 1)[1]
    assert "| concurrent | 4 | 8 | 100,000 | 100,000 | 0 | 0 | 6,500 | 4.0 ms |" in table


def test_targets_fail_when_missed_or_orders_are_lost() -> None:
    runs = [{"name": "latency", "exchange": rec(20_000, 2_000, 400, 900)},
            {"name": "concurrent", "exchange": rec(100_000, 6_000, 5_000, 30_000, lost=1)},
            {"name": "throughput", "exchange": rec(200_000, 5_000, 50_000, 90_000)}]
    got = {(t["run"], t["what"]): t["met"] for t in targets(runs)}
    assert got[("latency", "p50 <= 333 µs")] is False
    assert got[("latency", "p99 <= 1 ms")] is True
    assert got[("concurrent", "all acknowledged, none lost")] is False
    assert got[("concurrent", "p99 <= 21 ms")] is False
    assert got[("throughput", ">= 4,523 orders/s")] is True
    assert got[("throughput", "not below the concurrent run")] is False


def test_svg_is_well_formed_with_one_curve_per_series() -> None:
    fast = sorted(range(100_000, 200_000, 7))
    slow = sorted(x * 10 for x in fast)
    text = report.svg("latency <1x1> & co", {"exchange": slow, "engine only": fast})
    root = ET.fromstring(text)
    ns = "{http://www.w3.org/2000/svg}"
    assert len(root.findall(f"{ns}polyline")) == 2
    labels = [t.text for t in root.findall(f"{ns}text")]
    assert "latency <1x1> & co" in labels and "exchange" in labels and "99%" in labels
    # an empty series draws nothing but the axes, and a single value still makes a valid picture
    ET.fromstring(report.svg("empty", {"exchange": []}))
    assert len(ET.fromstring(report.svg("one", {"x": [5_000]})).findall(f"{ns}polyline")) == 1


def test_component_rates_are_found_in_nested_json() -> None:
    found = dict(_flatten({"core": {"orders_per_s": 250_000.0, "runs": [{"name": "deep", "orders_per_s": 9}]},
                           "ok": True, "label": "x"}))
    assert found == {"core.orders_per_s": 250_000.0, "core.runs[deep].orders_per_s": 9}
