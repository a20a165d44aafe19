"""``python -m benchmarks.relay``: the floor of a round trip through two Redis stream hops.

What the exchange's 1x1 run cannot beat with its bus: process A appends to stream 1 (XADD), process B,
blocked on it (XREAD BLOCK), appends to stream 2, and A, blocked on that, reads it back. No FIX, no
matching, nothing decoded: one tiny entry each way. Measured with both clients the project has, the
lean RESP connection (shared.resp, hiredis's parser on a plain socket) and redis-py, each in its own
pair of processes on its own redis-server; the floor is the faster. A plain PING round trip is given
beside it. Percentiles are exact nearest-rank over every measured round trip (a benchmark, not a test).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import redis

from shared import machine
from shared.redis_server import RedisServer
from shared.resp import RespConnection, check, command

S1, S2 = b"fixlab:relay:1", b"fixlab:relay:2"


def _last_id(reply: Any) -> bytes:
    """The id of the last entry of an XREAD reply on one stream."""
    return bytes(reply[0][1][-1][0])


def _echo_lean(url: str, rounds: int) -> None:
    """Process B with the lean connection: each entry on S1 is answered on S2."""
    conn = RespConnection(url, timeout_s=30)
    last = b"0-0"
    for _ in range(rounds):
        reply = check(conn.roundtrip(command(b"XREAD", b"BLOCK", 0, b"STREAMS", S1, last), 1)[0])
        last = _last_id(reply)
        check(conn.roundtrip(command(b"XADD", S2, b"*", b"b", b"x"), 1)[0])
    conn.close()


def _echo_redis_py(url: str, rounds: int) -> None:
    r = redis.Redis.from_url(url, socket_timeout=30)
    last = b"0-0"
    for _ in range(rounds):
        reply: Any = r.xread({S1: last}, block=0)
        last = _last_id(reply)
        r.xadd(S2, {b"b": b"x"})
    r.close()


def _drive_lean(url: str, rounds: int) -> list[int]:
    conn = RespConnection(url, timeout_s=30)
    last = b"0-0"
    out = []
    xadd = command(b"XADD", S1, b"*", b"b", b"x")
    for _ in range(rounds):
        t0 = time.perf_counter_ns()
        check(conn.roundtrip(xadd, 1)[0])
        reply = check(conn.roundtrip(command(b"XREAD", b"BLOCK", 0, b"STREAMS", S2, last), 1)[0])
        out.append(time.perf_counter_ns() - t0)
        last = _last_id(reply)
    conn.close()
    return out


def _drive_redis_py(url: str, rounds: int) -> list[int]:
    r = redis.Redis.from_url(url, socket_timeout=30)
    last = b"0-0"
    out = []
    for _ in range(rounds):
        t0 = time.perf_counter_ns()
        r.xadd(S1, {b"b": b"x"})
        reply: Any = r.xread({S2: last}, block=0)
        out.append(time.perf_counter_ns() - t0)
        last = _last_id(reply)
    r.close()
    return out


def _ping(url: str, rounds: int) -> list[int]:
    conn = RespConnection(url, timeout_s=30)
    ping = command(b"PING")
    out = []
    for _ in range(rounds):
        t0 = time.perf_counter_ns()
        conn.roundtrip(ping, 1)
        out.append(time.perf_counter_ns() - t0)
    conn.close()
    return out


def percentiles(ns: list[int]) -> dict[str, float]:
    """Nearest-rank p50/p90/p99 and the max, in microseconds."""
    s = sorted(ns)

    def rank(q: float) -> float:
        return round(s[max(0, min(len(s) - 1, int(q * len(s) + 0.999999) - 1))] / 1000, 1)

    return {"p50_us": rank(0.50), "p90_us": rank(0.90), "p99_us": rank(0.99),
            "max_us": round(s[-1] / 1000, 1)}


def relay(client: str, rounds: int, warmup: int) -> dict[str, Any]:
    """One relay on a fresh redis-server: ``rounds`` measured after ``warmup``."""
    drive, echo = {"lean": (_drive_lean, _echo_lean), "redis-py": (_drive_redis_py, _echo_redis_py)}[client]
    with tempfile.TemporaryDirectory(prefix="fixlab-relay-") as tmp:
        server = RedisServer(Path(tmp) / "redis").start()
        try:
            b = mp.get_context("spawn").Process(target=echo, args=(server.url, warmup + rounds), daemon=True)
            b.start()
            lat = drive(server.url, warmup + rounds)[warmup:]
            b.join(10)
            ping = _ping(server.url, rounds)
        finally:
            server.stop()
    return {"client": client, "rounds": rounds, **percentiles(lat), "ping": percentiles(ping)}


def measure(rounds: int, warmup: int) -> dict[str, Any]:
    """Both clients, side by side; ``floor`` is the faster one's p50 and p99."""
    rows = [relay(client, rounds, warmup) for client in ("lean", "redis-py")]
    best = min(rows, key=lambda row: row["p50_us"])
    floor = {"client": best["client"], "p50_us": best["p50_us"], "p99_us": best["p99_us"]}
    return {"rows": rows, "floor": floor}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=20_000)
    parser.add_argument("--warmup", type=int, default=1_000)
    parser.add_argument("--out", type=Path, help="write the results here as JSON")
    args = parser.parse_args(argv)
    result = {"benchmark": "relay: A XADD -> B XREAD BLOCK -> B XADD -> A XREAD BLOCK, one entry each way",
              "command": "python -m benchmarks.relay " + " ".join(sys.argv[1:] if argv is None else argv),
              "date": datetime.now(UTC).isoformat(timespec="seconds"), **machine.describe(),
              **measure(args.rounds, args.warmup)}
    text = json.dumps(result, indent=2)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
