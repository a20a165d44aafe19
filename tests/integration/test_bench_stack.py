"""The bench against the real exchange (matcher + gateway processes, a real redis-server), and the
suite end to end at a tiny scale: fresh stacks and baselines started and stopped, results written."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from services.bench.procs import base_env
from tests.gateway_stack import gateway_stack, matcher_available
from tests.helpers import eventually

pytestmark = [
    pytest.mark.xdist_group("serial"),
    pytest.mark.integration,
    pytest.mark.skipif(not matcher_available(), reason="services.matcher is not in this checkout"),
]


def test_two_sessions_through_the_whole_exchange(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    with gateway_stack(None) as stack:
        proc = subprocess.run(
            [sys.executable, "-m", "services.bench", "--addr", f"127.0.0.1:{stack.fix_port}",
             "--sessions", "2", "--window", "4", "--orders", "300", "--warmup", "20", "--out", str(out)],
            env=base_env(), capture_output=True, text=True, timeout=90)
        assert proc.returncode == 0, proc.stderr
        assert stack.gateway.poll() is None  # the exchange is still up after the bench logged out
    r = json.loads(out.read_text())
    assert (r["sessions"], r["window"], r["orders"]) == (2, 4, 300)
    # every order a real New from the matcher: in the band, one unit, so none is rejected or lost
    assert (r["acknowledged"], r["rejected"], r["lost"]) == (300, 0, 0)
    assert 0 < r["ack_p50_us"] <= r["ack_p99_us"] <= r["ack_max_us"]


def test_price_outside_the_band_is_rejected_not_lost(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    with gateway_stack(None) as stack:
        proc = subprocess.run(
            [sys.executable, "-m", "services.bench", "--addr", f"127.0.0.1:{stack.fix_port}",
             "--sessions", "1", "--window", "2", "--orders", "10", "--warmup", "0", "--price", "500.00",
             "--out", str(out)],
            env=base_env(), capture_output=True, text=True, timeout=90)
    assert proc.returncode == 0, proc.stderr
    r = json.loads(out.read_text())
    assert (r["acknowledged"], r["rejected"], r["lost"]) == (0, 10, 0)


def test_the_suite_at_a_tiny_scale(tmp_path: Path) -> None:
    results = tmp_path / "results"
    proc = subprocess.run(
        [sys.executable, "-m", "services.bench.suite", "--runs", "latency", "--scale", "0.002",
         "--warmup", "5", "--no-components", "--stacks", "engine,lean", "--results-dir", str(results)],
        env=base_env(), capture_output=True, text=True, timeout=110)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads((results / "results.json").read_text())
    assert [r["name"] for r in doc["runs"]] == ["latency"]
    for run in doc["runs"]:
        for side in ("exchange", "baseline"):
            assert run[side]["acknowledged"] == run["orders"] and run[side]["lost"] == 0
        svg = (results / run["svg"]).read_text()
        assert svg.startswith("<svg") and svg.count("<polyline") == 2
    assert doc["versions"]["quickfix"] == "1.16.0" and doc["machine"]["logical_cpus"]
    table = (results / "results.md").read_text()
    assert "| latency | 1 | 1 | 40 | 40 | 0 | 0 |" in table
    assert doc["targets"] and all(t["run"] == "latency" for t in doc["targets"])


def _children(pid: int) -> set[int]:
    out = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.add(int(stat.parent.name))
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_sigterm_stops_the_suite_and_everything_it_started(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "services.bench.suite", "--runs", "latency", "--scale", "5",
         "--no-baseline", "--no-components", "--results-dir", str(tmp_path)],
        env=base_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            if "fresh exchange" in line:
                break
        # redis-server, matcher, gateway and the bench process itself, all running
        kids = eventually(lambda: (k if len(k := _children(proc.pid)) >= 4 else None), timeout=60,
                          what="the stack and the bench started")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 143
        eventually(lambda: not any(_alive(k) for k in kids), timeout=30, what="every child stopped")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()
