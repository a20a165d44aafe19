"""The relay floor's tooling runs end to end on a few round trips (no speed is checked here)."""

from __future__ import annotations

import pytest

from benchmarks.relay import measure

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("serial")]


def test_the_relay_measures_both_clients_and_names_the_faster_as_the_floor() -> None:
    result = measure(rounds=200, warmup=20)
    rows = {row["client"]: row for row in result["rows"]}
    assert set(rows) == {"lean", "redis-py"}
    for row in rows.values():
        assert row["rounds"] == 200 and 0 < row["p50_us"] <= row["p99_us"] <= row["max_us"]
    assert result["floor"]["p50_us"] == min(row["p50_us"] for row in rows.values())
