"""Two matcher shards against one redis-server: each instrument's book lives in exactly one shard.

The matchers are the processes `make run` starts for FIXLAB_SHARDS=ACORN.LAB:a,BIRCH.LAB:b (the runner's
own specs, so this also proves the runner's shard map), fed through the orders streams as a gateway
would feed them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml

from services.stack import SHARD_ENV, stack_specs
from shared import bus, streams
from shared.schema import (
    BUY,
    DAY,
    REJ_UNKNOWN_SYMBOL,
    SELL,
    Accepted,
    Depth,
    Filled,
    MatcherSnapshot,
    Message,
    NewOrder,
    Rejected,
    decode,
    decode_batch,
)
from shared.streams import inspect
from tests.helpers import eventually

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SHARDS = {"ACORN.LAB": "a", "BIRCH.LAB": "b"}
GW = "gw-shards"

if not (ROOT / "services" / "matcher" / "__main__.py").is_file():
    pytest.skip("services.matcher has not landed in this checkout", allow_module_level=True)


def _events(r: redis.Redis, stream: str) -> list[Message]:
    rows: Any = r.xrange(stream)
    return [m for _, fields in rows for m in decode_batch(fields[streams.BATCH_FIELD])]


def _order(session: str, clordid: str, symbol: str, side: int, price: int, qty: int, seq: int) -> NewOrder:
    return NewOrder(session, clordid, symbol, side, price, qty, DAY, GW, seq, 1_700_000_000_000_000_000 + seq)


@pytest.fixture
def shard_env(redis_url: str, tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "REDIS_URL": redis_url,
        "FIXLAB_SHARDS": ",".join(f"{sym}:{shard}" for sym, shard in SHARDS.items()),
        "FIXLAB_MATCHER_HEALTH_SECONDS": "0.2",
        "FIXLAB_MATCHER_BLOCK_MS": "100",
        "FIXLAB_RUN_DIR": str(tmp_path),
        "PYTHONUNBUFFERED": "1",
    }


@pytest.fixture
def matchers(shard_env: dict[str, str], tmp_path: Path) -> Iterator[dict[str, subprocess.Popen[bytes]]]:
    """The runner's matcher services for the shard map, as real processes."""
    specs = [s for s in stack_specs(env=shard_env) if s.argv[2] == "services.matcher"]
    assert [(s.name, s.env[SHARD_ENV]) for s in specs] == [("matcher-a", "a"), ("matcher-b", "b")]
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        for spec in specs:
            log = (tmp_path / f"{spec.name}.log").open("wb")
            procs[spec.env[SHARD_ENV]] = subprocess.Popen(
                list(spec.argv), cwd=ROOT, env={**shard_env, **spec.env}, stdout=log,
                stderr=subprocess.STDOUT)
            log.close()
        yield procs
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for name, proc in procs.items():
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                pytest.fail(f"matcher shard {name} did not stop on SIGTERM")


def _healthchecks() -> dict[str, list[str]]:
    """The compose healthcheck command of each matcher shard (docker-compose.yml + the shards override)."""
    main = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    override = yaml.safe_load((ROOT / "deploy" / "compose.shards.yml").read_text())["services"]
    return {override["matcher"]["environment"][SHARD_ENV]: main["matcher"]["healthcheck"]["test"],
            override["matcher-b"]["environment"][SHARD_ENV]: override["matcher-b"]["healthcheck"]["test"]}


def _healthy(check: list[str], shard: str, redis_url: str) -> bool:
    assert check[:2] == ["CMD", "python"]
    env = {**os.environ, "REDIS_URL": redis_url, SHARD_ENV: shard, "PYTHONPATH": str(ROOT)}
    # The image's `python` is this interpreter here.
    argv = [sys.executable, *check[2:]]
    return subprocess.run(argv, env=env, capture_output=True, timeout=30).returncode == 0


def _logs(tmp_path: Path) -> str:
    return "\n".join(p.read_text(errors="replace")[-3000:] for p in sorted(tmp_path.glob("matcher-*.log")))


def test_two_shards_each_own_one_book(redis_url: str, matchers: dict[str, subprocess.Popen[bytes]],
                                      tmp_path: Path) -> None:
    r = bus.connect(redis_url)
    try:
        # Both shards up: each reports its own health instance.
        def both_healthy() -> bool:
            for name, proc in matchers.items():
                assert proc.poll() is None, f"matcher {name} exited:\n{_logs(tmp_path)}"
            return all(r.exists(streams.health_key("matcher", s)) for s in ("a", "b"))

        eventually(both_healthy, timeout=30, what="both matcher shards reporting health")
        checks = _healthchecks()
        assert sorted(checks) == ["a", "b"]
        # docker compose's healthcheck of each shard passes, and would fail for a shard nobody runs.
        assert all(_healthy(check, shard, redis_url) for shard, check in checks.items())
        assert not _healthy(checks["a"], "c", redis_url)

        orders_a, orders_b = streams.orders_stream("a"), streams.orders_stream("b")
        # Shard a: two ACORN orders that trade; a BIRCH order sent to the wrong shard.
        bus.publish(r, orders_a, [_order("S1", "a1", "ACORN.LAB", BUY, 10000, 5, 1),
                                  _order("S2", "a2", "ACORN.LAB", SELL, 10000, 3, 1)], 1000)
        bus.publish(r, orders_a, [_order("S1", "wrong", "BIRCH.LAB", BUY, 2500, 1, 2)], 1000)
        # Shard b: one BIRCH order that rests.
        bus.publish(r, orders_b, [_order("S3", "b1", "BIRCH.LAB", BUY, 2500, 4, 1)], 1000)

        # Each shard answers the gateway on its own events stream, in its own slot.
        events_a, events_b = streams.shard_events_stream("a", GW), streams.shard_events_stream("b", GW)
        eventually(lambda: len(_events(r, events_a)) + len(_events(r, events_b)) >= 6, timeout=20,
                   what="the shards' events")
        events = _events(r, events_a) + _events(r, events_b)
        by_id = {(type(e).__name__, e.clordid) for e in events if hasattr(e, "clordid")}
        assert {("Accepted", "a1"), ("Accepted", "a2"), ("Filled", "a1"), ("Filled", "a2"),
                ("Accepted", "b1")} <= by_id
        assert {e.clordid for e in _events(r, events_b) if hasattr(e, "clordid")} == {"b1"}
        assert not r.exists(streams.events_stream(GW))  # the gateway's own: its intake's refusals only
        fills = [e for e in events if isinstance(e, Filled)]
        assert len({f.match_id for f in fills}) == 1 and {f.last_qty for f in fills} == {3}
        (wrong,) = [e for e in events if isinstance(e, Rejected)]
        # Shard a has no BIRCH.LAB book: the order is refused there, not matched.
        assert (wrong.clordid, wrong.reason) == ("wrong", REJ_UNKNOWN_SYMBOL)
        assert not any(isinstance(e, Accepted) and e.clordid == "wrong" for e in events)

        # Each shard's market data names only its own instrument, on its own market stream.
        for shard, symbol in (("a", "ACORN.LAB"), ("b", "BIRCH.LAB")):
            depth = [m for m in _events(r, streams.shard_market_stream(shard)) if isinstance(m, Depth)]
            assert {d.symbol for d in depth} == {symbol}

        # Each orders stream is read by its own shard's consumer only (the inspector's view).
        groups = {s["stream"]: s["groups"] for s in inspect.list_streams(r)}
        for shard, stream in (("a", orders_a), ("b", orders_b)):
            (group,) = groups[stream]
            assert [c["name"] for c in group["consumers"]] == [f"matcher-{shard}"]
            eventually(lambda stream=stream: inspect.stream_info(r, stream)["groups"][0]["pending"] == 0,
                       what=f"{stream} fully acknowledged")
    finally:
        r.close()

    # A clean stop stores each shard's final snapshot: its books hold only its own instrument.
    for proc in matchers.values():
        proc.send_signal(signal.SIGTERM)
    for name, proc in matchers.items():
        assert proc.wait(15) == 0, f"matcher {name}:\n{_logs(tmp_path)}"
    assert not any(_healthy(check, shard, redis_url) for shard, check in _healthchecks().items())
    r = bus.connect(redis_url)
    try:
        snaps = {s: decode(r.get(streams.snapshot_key(s)) or b"") for s in ("a", "b")}
        for shard, snap in snaps.items():
            assert isinstance(snap, MatcherSnapshot) and snap.shard == shard
        resting = {shard: {(o[3], o[2], o[7]) for o in snap.orders}  # type: ignore[attr-defined]
                   for shard, snap in snaps.items()}
        assert resting == {"a": {("ACORN.LAB", "a1", 2)}, "b": {("BIRCH.LAB", "b1", 4)}}
    finally:
        r.close()
