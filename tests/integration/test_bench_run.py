"""The bench end to end: real QuickFIX sessions over loopback against the engine-only baseline
acceptor, several bench processes meeting on a real Redis, lost orders, and bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import redis

from services.bench.procs import Baseline, base_env
from shared import streams
from shared.redis_server import free_port

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("serial")]


def bench(*args: str, env: dict[str, str] | None = None,
          timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "services.bench", *args], env=base_env(env),
                          capture_output=True, text=True, timeout=timeout)


def read(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def test_two_sessions_against_the_engine_only_acceptor(tmp_path: Path) -> None:
    out, lat = tmp_path / "r.json", tmp_path / "lat.txt"
    with Baseline(tmp_path) as bl:
        proc = bench("--addr", f"127.0.0.1:{bl.port}", "--sessions", "2", "--window", "4",
                     "--orders", "400", "--warmup", "20", "--out", str(out), "--latencies", str(lat))
    assert proc.returncode == 0, proc.stderr
    r = read(out)
    assert (r["sessions"], r["window"], r["orders"]) == (2, 4, 400)
    assert (r["sent"], r["acknowledged"], r["rejected"], r["lost"]) == (400, 400, 0, 0)
    assert 0 < r["ack_p50_us"] <= r["ack_p90_us"] <= r["ack_p99_us"] <= r["ack_max_us"]
    assert r["orders_per_s"] > 0
    latencies = [int(x) for x in lat.read_text().split()]
    assert len(latencies) == 400 and latencies == sorted(latencies)
    assert round(latencies[-1] / 1000, 1) == r["ack_max_us"]


def test_unanswered_orders_are_counted_lost(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    # The baseline answers warm-up orders 1..10 (none is a multiple of 11), then leaves every 11th
    # unanswered: of 100 measured orders (11..110) ten are never answered.
    with Baseline(tmp_path, ignore_every=11) as bl:
        proc = bench("--addr", f"127.0.0.1:{bl.port}", "--sessions", "1", "--window", "50",
                     "--orders", "100", "--warmup", "10", "--stall", "1", "--out", str(out))
    assert proc.returncode == 3, proc.stderr  # lost orders fail the run
    r = read(out)
    assert r["lost"] == 10 and r["acknowledged"] == 90 and r["sent"] == 100


def test_two_bench_processes_meet_at_the_barrier_and_merge(tmp_path: Path, redis_url: str) -> None:
    outs = [tmp_path / "a.json", tmp_path / "b.json"]
    lats = [tmp_path / "a.lat", tmp_path / "b.lat"]
    with Baseline(tmp_path) as bl:
        procs = [subprocess.Popen(
            [sys.executable, "-m", "services.bench", "--addr", f"127.0.0.1:{bl.port}", "--sessions", "3",
             "--window", "2", "--orders", "300", "--warmup", "10", "--instances", "2",
             "--run-id", "merge-test", "--out", str(out), "--latencies", str(lat)],
            env=base_env({"REDIS_URL": redis_url}), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True) for out, lat in zip(outs, lats, strict=True)]
        try:
            results = [p.communicate(timeout=90) for p in procs]
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
    for p, (_, err) in zip(procs, results, strict=True):
        assert p.returncode == 0, err
    a, b = read(outs[0]), read(outs[1])
    for r in (a, b):
        # one merged report: every session and order of the run, from both instances
        assert (r["instances"], r["sessions"], r["orders"]) == (2, 3, 300)
        assert (r["acknowledged"], r["lost"]) == (300, 0)
    assert a["ack_p99_us"] == b["ack_p99_us"] and a["orders_per_s"] == b["orders_per_s"]
    assert lats[0].read_text() == lats[1].read_text() and len(lats[0].read_text().split()) == 300
    r = redis.Redis.from_url(redis_url)
    # distinct CompIDs: three in all were claimed (2 + 1), and both instances arrived
    assert int(r.get(streams.bench_compids_key("merge-test")) or 0) == 3
    assert int(r.get(streams.bench_barrier_key("merge-test")) or 0) == 2
    assert r.xlen(streams.bench_results_stream("merge-test")) == 2


def test_a_third_instance_is_refused(tmp_path: Path, redis_url: str) -> None:
    r = redis.Redis.from_url(redis_url)
    r.set(streams.bench_instances_key("full"), 2)
    proc = bench("--addr", "127.0.0.1:1", "--instances", "2", "--run-id", "full",
                 env={"REDIS_URL": redis_url})
    assert proc.returncode == 1 and "already has its 2 instances" in proc.stderr


@pytest.mark.parametrize(("args", "message"), [
    (["--addr", "nohost"], "is not HOST:PORT"),
    (["--addr", "127.0.0.1:70000"], "is not HOST:PORT"),
    (["--sessions", "0"], "must be at least 1"),
    (["--window", "x"], "is not a whole number"),
    (["--warmup", "-1"], "must not be negative"),
])
def test_bad_arguments_fail_with_one_clear_line(args: list[str], message: str) -> None:
    proc = bench(*args)
    assert proc.returncode == 2 and message in proc.stderr


def test_several_instances_need_a_run_id_and_redis() -> None:
    proc = bench("--instances", "2")
    assert proc.returncode == 2 and "--run-id" in proc.stderr
    proc = bench("--instances", "2", "--run-id", "x", env={"REDIS_URL": ""})
    assert proc.returncode == 2 and "REDIS_URL" in proc.stderr


def test_too_many_sessions_for_the_pool() -> None:
    proc = bench("--sessions", "10", "--first-compid", "250")
    assert proc.returncode == 1 and "outside the pool" in proc.stderr


def test_nobody_listening_is_a_logon_timeout_not_a_hang() -> None:
    proc = bench("--addr", f"127.0.0.1:{free_port()}", "--logon-timeout", "2", "--warmup", "0")
    assert proc.returncode == 1 and "not logged on within 2s: BENCH001" in proc.stderr


def test_an_instance_alone_at_the_barrier_gives_up_with_a_clear_error(tmp_path: Path,
                                                                      redis_url: str) -> None:
    with Baseline(tmp_path) as bl:
        proc = bench("--addr", f"127.0.0.1:{bl.port}", "--sessions", "2", "--orders", "10",
                     "--warmup", "2", "--instances", "2", "--run-id", "alone", "--barrier-timeout", "1",
                     env={"REDIS_URL": redis_url})
    assert proc.returncode == 1
    assert "barrier: 1 of 2 instances arrived in 1s" in proc.stderr


def test_the_engine_alone_with_fills_trades_crossing_orders_as_the_exchange_reports_them(
        tmp_path: Path) -> None:
    """``--fills``: a strict stock client (the installed FIX44.xml) gets a New for every order and,
    when a sell meets a resting buy, a Fill on each side, oldest resting order first; no session
    Reject (the Fills are valid FIX 4.4)."""
    from tests.stock_client import nos, stock_sessions

    with Baseline(tmp_path, fills=True) as bl, \
            stock_sessions(tmp_path, bl.port, ["BENCH001", "BENCH002"]) as (a, b):
        a.send("D", nos("a1", 1, 1, "100.00"))
        a.client.wait("8", lambda m: m.get(11) == "a1" and m.get(150) == "0")
        a.send("D", nos("a2", 1, 1, "100.00"))
        a.client.wait("8", lambda m: m.get(11) == "a2" and m.get(150) == "0")
        b.send("D", nos("b1", 2, 1, "100.00"))
        taker = b.client.wait("8", lambda m: m.get(11) == "b1" and m.get(150) == "F")
        maker = a.client.wait("8", lambda m: m.get(150) == "F")
        assert maker[11] == "a1"  # the older buy
        assert (taker[39], taker[14], taker[151], taker[31], taker[32]) == ("2", "1", "0", "100.00", "1")
        assert maker[527] == taker[527]  # one match, one SecondaryExecID on both sides
        assert not a.client.find("8", lambda m: m.get(11) == "a2" and m.get(150) == "F")
        assert a.client.session_rejects() == [] and b.client.session_rejects() == []
