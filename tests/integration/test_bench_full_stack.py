"""The suite's full-stack mode at a tiny scale: ``python -m services`` as ``make run`` starts it (bots
off), a page watching the books, the bench through it, CPU per process from /proc. No speed asserted."""

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


@pytest.mark.timeout(90)
def test_the_full_stack_mode_completes_a_tiny_run(tmp_path: Path) -> None:
    results = tmp_path / "results"
    proc = subprocess.run(
        [sys.executable, "-m", "services.bench.suite", "--runs", "concurrent", "--scale", "0.004",
         "--warmup", "5", "--no-components", "--stacks", "full", "--results-dir", str(results)],
        env=base_env(), capture_output=True, text=True, timeout=85)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = json.loads((results / "results.json").read_text())["runs"][0]
    full = run["full"]
    assert (full["acknowledged"], full["lost"]) == (run["orders"], 0)
    # every process of the stack is there, each with its CPU per order
    cpu = full["cpu"]["us_per_order"]
    assert {"run", "redis-server", "matcher", "gateway", "web", "bots", "bench", "page"} <= set(cpu)
    # the page watched the books: its snapshot, then the trades the bench's orders made
    assert run["page"]["by_type"]["hello"] == 1 and run["page"]["by_type"].get("trade", 0) > 0
    assert "full stack" in (results / "results.md").read_text()
