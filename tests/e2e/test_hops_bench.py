"""`python -m benchmarks.hops` on real processes: the engine alone, the lean stack traced at 1x1
(bench, gateway, matcher each writing their marks), and the relay.

Every hop of a lone order's route is found in the processes' marks for most measured orders, and
the hops add up to the round trip the bench measured. No speed is asserted.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.hops import HOPS
from services.bench.procs import base_env

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("serial")]
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(300)
def test_a_lone_orders_route_is_traced_hop_by_hop(tmp_path: Path) -> None:
    out = tmp_path / "hops.json"
    argv = ["--scale", "0.05", "--relay-rounds", "300", "--out", str(out)]
    proc = subprocess.run([sys.executable, "-m", "benchmarks.hops", *argv], cwd=ROOT, env=base_env(),
                          capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    lean = result["lean"]
    assert lean["orders"] == 1000 and lean["acknowledged"] == 1000 and lean["lost"] == 0
    # The last 80% of the measured orders (and their warm-up), most of them followed end to end.
    assert result["orders_paired"] >= 0.5 * 0.8 * (lean["orders"] + 1000)
    assert [row["hop"] for row in result["hops"]] == [hop[0] for hop in HOPS]
    assert all(row["p50_us"] > 0 for row in result["hops"])
    # The hops cover the round trip: their means add up to it (within the median's difference).
    total = sum(row["mean_us"] for row in result["hops"])
    assert 0.5 * lean["ack_p50_us"] < total < 3 * lean["ack_p50_us"]
    assert (out.with_suffix(".md")).read_text().count("\n| ") >= len(HOPS) + 4
