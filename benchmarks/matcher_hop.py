"""``python -m benchmarks.matcher_hop``: the matcher hop with small batches (a benchmark, not a test).

What the end-to-end bench puts on the matcher: tiny entries, a wake-up per batch. Runs the real
``python -m services.matcher`` process on its own redis-server and measures, over a lean RESP
connection (shared.resp) so the load generator stays cheap:
- latency: one order at a time, each in its own entry; from just before its XADD to its Accepted
  read back from the events stream (XREAD BLOCK). Nearest-rank p50/p90/p99 and the max;
- paced: ``--producers`` processes, each XADDing one-order entries at an even pace (``--rate`` in
  total), as a gateway in front of a few sessions would;
- window: each producer keeps ``--window`` orders unanswered, one entry per write.
For each run, the matcher's CPU per order (user + system, from /proc: Linux only).
Orders alternate buy and sell, one unit, one price, so they trade and the book stays small.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from shared import streams
from shared.redis_server import RedisServer
from shared.resp import RespConnection, command
from shared.schema import Accepted, Filled, NewOrder, decode_batch, encode_batch

ORDERS = streams.orders_stream("0").encode()
SYMBOL, PRICE = "ACORN.LAB", 10000


def _cpu(pid: int) -> tuple[float, float]:
    """User and system CPU seconds of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def _order(session: str, gateway: str, i: int) -> NewOrder:
    return NewOrder(session, f"{session}-{i}", SYMBOL, 1 if i % 2 == 0 else 2, PRICE, 1, 0, gateway, i + 1, 0)


def _xadd(payload: bytes) -> bytes:
    return command(b"XADD", ORDERS, b"MAXLEN", b"~", b"1000000", b"*", streams.BATCH_FIELD, payload)


def _read_events(stream: bytes, last: bytes) -> bytes:
    return command(b"XREAD", b"COUNT", b"100", b"BLOCK", b"2000", b"STREAMS", stream, last)


def _answers(reply: Any) -> tuple[bytes | None, list[Any]]:
    if not reply:
        raise RuntimeError("no event within 2 s")
    last, msgs = None, []
    for entry_id, flat in reply[0][1]:
        last = entry_id
        msgs += decode_batch(flat[1])
    return last, msgs


def _percentiles(samples: list[float]) -> dict[str, int]:
    samples.sort()

    def rank(p: int) -> int:  # nearest rank
        return round(samples[max(0, -(-len(samples) * p // 100) - 1)] * 1e6)
    return {"p50_us": rank(50), "p90_us": rank(90), "p99_us": rank(99), "max_us": round(samples[-1] * 1e6)}


def latency(url: str, n: int, warmup: int, tag: str) -> dict[str, Any]:
    conn = RespConnection(url)
    events = streams.shard_events_stream("0", "lat" + tag).encode()
    last = b"0"
    took: list[float] = []
    for i in range(warmup + n):
        order = _order("L" + tag, "lat" + tag, i)
        payload = encode_batch([order])
        t0 = time.perf_counter()
        conn.roundtrip(_xadd(payload), 1)
        while True:
            new_last, msgs = _answers(conn.roundtrip(_read_events(events, last), 1, timeout_s=5)[0])
            last = new_last or last
            if any(isinstance(m, Accepted) and m.clordid == order.clordid for m in msgs):
                break
        if i >= warmup:
            took.append(time.perf_counter() - t0)
    conn.close()
    return {"orders": n, **_percentiles(took)}


def _paced(url: str, k: int, n: int, rate: float, go: Any, out: Any, tag: str) -> None:
    conn = RespConnection(url)
    session, gateway = f"Q{k}{tag}", f"q{k}{tag}"
    go.wait()
    t0 = time.perf_counter()
    last = b""
    for i in range(n):
        wait = t0 + i / rate - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        last = conn.roundtrip(_xadd(encode_batch([_order(session, gateway, i)])), 1)[0]
    out.put(last)


def _windowed(url: str, k: int, n: int, window: int, go: Any, out: Any, tag: str) -> None:
    conn = RespConnection(url)
    session, gateway = f"W{k}{tag}", f"w{k}{tag}"
    events = streams.shard_events_stream("0", gateway).encode()
    last = b"0"
    sent = acked = 0
    go.wait()
    while acked < n:
        parts = []
        free = min(window - (sent - acked), n - sent)
        if free > 0:
            parts.append(_xadd(encode_batch([_order(session, gateway, sent + j) for j in range(free)])))
            sent += free
        parts.append(_read_events(events, last))
        new_last, msgs = _answers(conn.roundtrip(b"".join(parts), len(parts), timeout_s=5)[-1])
        last = new_last or last
        for m in msgs:
            if isinstance(m, Accepted):
                acked += 1
            elif not isinstance(m, Filled):
                raise RuntimeError(f"unexpected answer {m!r}")
    out.put(None)


def _id(entry_id: bytes) -> tuple[int, ...]:
    return tuple(int(x) for x in entry_id.split(b"-"))


def load(url: str, matcher_pid: int, kind: str, producers: int, per: int, rate: float, window: int,
         tag: str) -> tuple[dict[str, Any], tuple[float, float]]:
    """Run one producer kind; its figures and the matcher's (user, system) CPU seconds meanwhile."""
    go = mp.Event()
    out: mp.Queue[Any] = mp.Queue()
    target, arg = (_paced, rate / producers) if kind == "paced" else (_windowed, window)
    procs = [mp.Process(target=target, args=(url, k, per, arg, go, out, tag)) for k in range(producers)]
    for p in procs:
        p.start()
    conn = RespConnection(url)
    applied = streams.applied_key(streams.orders_stream("0"), streams.MATCHER_GROUP).encode()
    u0, s0 = _cpu(matcher_pid)
    t0 = time.perf_counter()
    go.set()
    lasts = [out.get(timeout=600) for _ in procs]
    for p in procs:
        p.join()
    if kind == "paced":  # wait for the matcher to get through every entry
        top = max(lasts, key=_id)
        while (done := conn.call(b"GET", applied)) is None or _id(done) < _id(top):
            time.sleep(0.001)
    elapsed = time.perf_counter() - t0
    u1, s1 = _cpu(matcher_pid)
    conn.close()
    total = producers * per
    return {"producers": producers, "orders": total, "orders_per_s": round(total / elapsed),
            **({"offered_per_s": rate} if kind == "paced" else {"window": window})}, (u1 - u0, s1 - s0)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.matcher_hop", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--latency", type=int, default=3000, help="orders one at a time (0: skip)")
    p.add_argument("--paced", type=int, default=5000, help="orders per paced producer (0: skip)")
    p.add_argument("--rate", type=float, default=5000, help="paced orders per second, all producers")
    p.add_argument("--window", type=int, default=8, help="unanswered orders per windowed producer")
    p.add_argument("--windowed", type=int, default=5000, help="orders per windowed producer (0: skip)")
    p.add_argument("--producers", type=int, default=4)
    p.add_argument("--repeat", type=int, default=1)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        server = RedisServer(Path(tmp) / "redis").start()
        env = {**os.environ, "REDIS_URL": server.url, "FIXLAB_INSTRUMENTS": f"{SYMBOL}:100.00",
               "FIXLAB_PRO_RATA": "", "FIXLAB_SHARDS": "", "FIXLAB_MATCHER_SHARD": "0",
               "PYTHONUNBUFFERED": "1"}
        matcher = subprocess.Popen([sys.executable, "-m", "services.matcher"], env=env,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            conn = RespConnection(server.url)
            health = streams.health_key("matcher", "0").encode()
            deadline = time.monotonic() + 30
            while not conn.call(b"EXISTS", health):  # recovered and consuming
                if matcher.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the matcher did not start")
                time.sleep(0.05)
            conn.close()
            for r in range(args.repeat):
                tag = f"r{r}"
                result: dict[str, Any] = {}
                runs: list[tuple[str, Any]] = []
                if args.latency:
                    u0, s0 = _cpu(matcher.pid)
                    lat = latency(server.url, args.latency, 300, tag)
                    u1, s1 = _cpu(matcher.pid)
                    runs.append(("latency_1x1", (lat, (u1 - u0, s1 - s0), args.latency + 300)))
                for kind, per in (("paced", args.paced), ("windowed", args.windowed)):
                    if per:
                        figures, cpu = load(server.url, matcher.pid, kind, args.producers, per, args.rate,
                                            args.window, tag)
                        runs.append((kind, (figures, cpu, args.producers * per)))
                for name, (figures, (user, system), n) in runs:
                    per_order = round((user + system) / n * 1e6, 1)
                    result[name] = {**figures, "matcher_cpu_us_per_order": per_order,
                                    "matcher_user_system_us": [round(user / n * 1e6, 1),
                                                               round(system / n * 1e6, 1)]}
                print(json.dumps(result), flush=True)
        finally:
            matcher.terminate()
            matcher.wait(15)
            server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
