"""Issue 14's bench at a tiny scale: the suite's 'md' stack (the lean stack with 32 market-data
subscribers, python -m services.bench.mdsubs) beside the lean stack, results written with what the
subscribers received, every W and X valid at them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from services.bench.procs import base_env
from tests.gateway_stack import matcher_available

pytestmark = [
    pytest.mark.xdist_group("serial"),
    pytest.mark.integration,
    pytest.mark.skipif(not matcher_available(), reason="services.matcher is not in this checkout"),
]


def test_the_suite_benches_the_stack_with_market_data_subscribers(tmp_path: Path) -> None:
    results = tmp_path / "results"
    proc = subprocess.run(
        [sys.executable, "-m", "services.bench.suite", "--runs", "latency,concurrent", "--scale", "0.01",
         "--warmup", "5", "--no-components", "--stacks", "lean,md", "--results-dir", str(results)],
        env=base_env(), capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads((results / "results.json").read_text())
    latency, concurrent = doc["runs"]
    assert "md" not in latency  # the market-data comparison is on the 4x8 and 8x32 runs only
    md = concurrent["md"]
    assert md["acknowledged"] == concurrent["orders"] and md["lost"] == 0
    got = md["market_data"]
    assert got["sessions"] == 32 and got["session_rejects_sent"] == 0 and not got["errors"]
    assert got["snapshots"] == 32 * len(got["symbols"])  # a W of every instrument for each
    assert got["by_type"].get("X", 0) > 0 and "x_per_s" in got
    assert "mdsubs" in md["cpu"]["us_per_order"]
    assert [t["run"] for t in doc["targets"] if t.get("stack") == "md"] == ["concurrent", "concurrent"]
    assert "## Market data" in (results / "results.md").read_text()
