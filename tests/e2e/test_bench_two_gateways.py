"""The bench through two gateways into two matcher shards, on the stack the runner starts
(`FIXLAB_GATEWAYS=2 FIXLAB_SHARDS=ACORN.LAB:a,BIRCH.LAB:b python -m services`, and
`python -m services --cluster`, which has both by default), bots off.

`python -m services.bench --gateways 2` sends each session to the gateway whose CompID range holds it
and alternates ACORN.LAB and BIRCH.LAB over the sessions: every order is acknowledged, none lost, and
the matchers' events streams show that each shard answered orders of each gateway, as many in all
as the bench sent (warm-up included), every one of them to the gateway that owns its session.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from services.bench.procs import base_env
from shared import redis_cluster, streams
from shared.compids import gateway_of
from shared.redis_server import free_port
from shared.schema import Accepted, decode_batch
from tests.e2e.runner_process import Runner, runner, two_free_ports

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("serial")]

SHARDS = {"ACORN.LAB": "a", "BIRCH.LAB": "b"}
SESSIONS, WINDOW, ORDERS, WARMUP = 8, 8, 4000, 20


def accepted(r: Any, shard: str, gateway_id: str) -> Counter[str]:
    """Bench orders the matcher of ``shard`` accepted for ``gateway_id``, counted by session."""
    out: Counter[str] = Counter()
    for _id, fields in r.xrange(streams.shard_events_stream(shard, gateway_id)):
        for msg in decode_batch(fields[streams.BATCH_FIELD]):
            if isinstance(msg, Accepted) and msg.session.startswith("BENCH"):
                assert SHARDS[msg.symbol] == shard, msg
                out[msg.session] += 1
    return out


def bench_through(run: Runner, fix_port: int, redis_url: str, tmp: Path, where: list[str]) -> None:
    """``where``: the bench's arguments naming the gateways (both ways it takes them are used)."""
    for k in (1, 2):
        run.wait_line(rf"gateway gw{k} ready on port {fix_port + k - 1} \(gateway {k} of 2", timeout=120)
    out = tmp / "bench.json"
    proc = subprocess.run(
        [sys.executable, "-m", "services.bench", *where,
         "--sessions", str(SESSIONS), "--window", str(WINDOW), "--orders", str(ORDERS),
         "--warmup", str(WARMUP), "--symbol", ",".join(SHARDS), "--price", "100.00,25.00",
         "--stall", "20", "--out", str(out)],
        env=base_env({"FIXLAB_GATEWAYS": ""}), capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    counts = (result["sent"], result["acknowledged"], result["rejected"], result["lost"])
    assert counts == (ORDERS, ORDERS, 0, 0)
    assert result["addr"] == f"127.0.0.1:{fix_port},127.0.0.1:{fix_port + 1}"

    r = redis_cluster.connect_any(redis_url)
    try:
        by = {(shard, gw): accepted(r, shard, gw) for shard in ("a", "b") for gw in ("gw1", "gw2")}
    finally:
        r.close()
    # Both shards carried orders of both gateways ...
    assert all(sum(c.values()) > 0 for c in by.values()), {k: sum(c.values()) for k, c in by.items()}
    # ... every one answered to the gateway that owns its session ...
    for (_, gw), sessions in by.items():
        assert {gateway_of(s, 2) for s in sessions} == {int(gw[2:])}, (gw, sorted(sessions))
    # ... and nothing more or less than the bench sent (a session orders one instrument: one shard).
    total = Counter[str]()
    for c in by.values():
        total.update(c)
    assert len(total) == SESSIONS
    assert sum(total.values()) == ORDERS + SESSIONS * WARMUP


@pytest.mark.timeout(300)
def test_the_bench_through_two_gateways_into_two_shards_on_one_redis(tmp_path: Path) -> None:
    fix_port = two_free_ports()
    env = {"FIXLAB_RUN_DIR": str(tmp_path / "run"), "FIXLAB_WEB_PORT": str(free_port()),
           "FIXLAB_FIX_PORT": str(fix_port), "FIXLAB_GATEWAYS": "2", "FIXLAB_BOTS": "0",
           "FIXLAB_SHARDS": ",".join(f"{sym}:{shard}" for sym, shard in SHARDS.items())}
    with runner(env) as run:
        url = run.wait_line(r"private redis-server on (redis://\S+)").group(1)
        services = run.wait_line(r"run +\| services: (.*)", timeout=120).group(1).split(", ")
        assert services == ["matcher-a", "matcher-b", "gateway-1", "gateway-2", "web", "bots"]
        bench_through(run, fix_port, url, tmp_path,
                      ["--addrs", f"127.0.0.1:{fix_port},127.0.0.1:{fix_port + 1}"])
        assert run.stop() == 0


@pytest.mark.skipif(shutil.which("redis-cli") is None, reason="redis-cli is needed to build a cluster")
@pytest.mark.timeout(300)
def test_the_bench_through_two_gateways_into_two_shards_on_the_cluster(tmp_path: Path) -> None:
    fix_port = two_free_ports()
    env = {"FIXLAB_RUN_DIR": str(tmp_path / "run"), "FIXLAB_WEB_PORT": str(free_port()),
           "FIXLAB_FIX_PORT": str(fix_port), "FIXLAB_BOTS": "0"}
    with runner(env, "--cluster") as run:
        nodes = run.wait_line(r"started a private Redis Cluster: 3 masters on (.*) \(data in", timeout=60)
        services = run.wait_line(r"run +\| services: (.*)", timeout=120).group(1).split(", ")
        assert services == ["matcher-a", "matcher-b", "gateway-1", "gateway-2", "web", "bots"]
        bench_through(run, fix_port, nodes.group(1).replace(" ", ""), tmp_path,
                      ["--addr", f"127.0.0.1:{fix_port}", "--gateways", "2"])
        assert run.stop() == 0
