"""Issue 12's targets are ratios within one run: 1x1 against the engine alone plus the relay floor,
4x8 against the engine alone's orders/s."""

from __future__ import annotations

from typing import Any

from services.bench.suite import floor_targets


def rec(p50: float, p99: float, rate: float) -> dict[str, Any]:
    return {"ack_p50_us": p50, "ack_p99_us": p99, "orders_per_s": rate}


def test_floor_targets_met_and_missed() -> None:
    runs = [{"name": "latency", "baseline": rec(140, 500, 5000), "exchange": rec(500, 900, 1500),
             "full": rec(600, 2000, 1200)},
            {"name": "concurrent", "baseline": rec(1000, 2000, 20000), "exchange": rec(4000, 9000, 10000),
             "full": rec(5000, 11000, 9000)}]
    relay = {"status": "ok", "result": {"floor": {"client": "lean", "p50_us": 300, "p99_us": 900}}}
    got = {(t["run"], t["stack"], t["what"].split()[0]): t["met"] for t in floor_targets(runs, relay)}
    # Floor 140 + 300 = 440 µs: lean p50 500 <= 506 (met), full 600 (not); p99 within 880 for lean only.
    assert got == {("latency", "lean", "p50"): True, ("latency", "lean", "p99"): False,
                   ("latency", "full", "p50"): False, ("latency", "full", "p99"): False,
                   ("concurrent", "lean", "orders/s"): True, ("concurrent", "full", "orders/s"): False}


def test_without_a_relay_figure_only_the_throughput_ratio_is_checked() -> None:
    runs = [{"name": "concurrent", "baseline": rec(1, 1, 100), "exchange": rec(1, 1, 60)}]
    assert [t["what"] for t in floor_targets(runs, None)] == ["orders/s >= 0.5 x the engine alone's"]


def test_the_engine_with_fills_is_shown_beside_the_throughput_ratio() -> None:
    runs = [{"name": "concurrent", "baseline": rec(1, 1, 20000), "fills": rec(1, 1, 12000),
             "exchange": rec(1, 1, 6000)}]
    (target,) = floor_targets(runs, None)
    assert target["met"] is False
    assert target["value"] == ("x0.30 (the engine alone sending the exchange's Fills too: x0.60;"
                               " this stack x0.50 of that)")
