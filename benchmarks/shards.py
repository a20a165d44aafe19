"""Rough figure for deploy/SCALING.md: matcher throughput through Redis, one shard against two.

    .venv/bin/python benchmarks/shards.py                              # both instruments on shard 0
    .venv/bin/python benchmarks/shards.py ACORN.LAB:a,BIRCH.LAB:b      # one matcher per instrument

Starts a private redis-server and the runner's matcher processes (services/stack.py) for the shard
map, publishes ORDERS NewOrders (100 per stream entry, as the gateway batches, instruments
alternating per entry, buy/sell alternating so they trade), and times from the first publish to
every orders stream fully acknowledged. A benchmark, not a test: run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
import time
from pathlib import Path

from services.stack import stack_specs
from shared import bus, streams
from shared.redis_server import RedisServer
from shared.schema import BUY, DAY, SELL, NewOrder
from shared.streams import inspect

PRICES = {"ACORN.LAB": 10000, "BIRCH.LAB": 2500}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("shards", nargs="?", default="", help="FIXLAB_SHARDS (default: everything on shard 0)")
    p.add_argument("--orders", type=int, default=200_000)
    args = p.parse_args()
    with RedisServer(Path(tempfile.mkdtemp())) as srv:
        env = {**os.environ, "REDIS_URL": srv.url, "FIXLAB_SHARDS": args.shards,
               "FIXLAB_MATCHER_BLOCK_MS": "50"}
        specs = [s for s in stack_specs(env=env) if s.argv[2] == "services.matcher"]
        procs = [subprocess.Popen(list(s.argv), env={**env, **s.env}, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL) for s in specs]
        try:
            shard_of = dict(item.split(":") for item in args.shards.split(",")) if args.shards else {}
            shard_of = {sym: shard_of.get(sym, "0") for sym in PRICES}
            r = bus.connect(srv.url)
            while not all(r.exists(streams.health_key("matcher", s)) for s in set(shard_of.values())):
                time.sleep(0.05)
            entries = []
            for k in range(args.orders // 100):
                sym = "ACORN.LAB" if k % 2 == 0 else "BIRCH.LAB"
                msgs = [NewOrder(f"S{j % 8}", f"c{k}-{j}", sym, BUY if j % 2 == 0 else SELL, PRICES[sym], 1,
                                 DAY, "gw1", k * 100 + j, 1) for j in range(100)]
                entries.append((streams.orders_stream(shard_of[sym]), msgs))
            start = time.perf_counter()
            pipe = r.pipeline(transaction=False)
            for stream, msgs in entries:
                bus.publish(pipe, stream, msgs, 10_000_000)
            pipe.execute()
            names = {streams.orders_stream(s) for s in shard_of.values()}
            while not all(g["lag"] == 0 and g["pending"] == 0
                          for g in (inspect.stream_info(r, n)["groups"][0] for n in names)):
                time.sleep(0.02)
            took = time.perf_counter() - start
            load = os.getloadavg()[0]
            print(f"shards {sorted(set(shard_of.values()))}: {args.orders:,} orders acknowledged in "
                  f"{took:.2f} s = {args.orders / took:,.0f} orders/s (load average {load:.1f})")
        finally:
            for proc in procs:
                proc.terminate()
            for proc in procs:
                proc.wait(20)


if __name__ == "__main__":
    main()
