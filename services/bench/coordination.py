"""Several bench processes as one run, over Redis: distinct instance numbers and CompIDs, a barrier
before the measured phase, and every instance's raw result on one stream for the merge."""

from __future__ import annotations

import time
from typing import Any

import redis

from shared import streams
from shared.bus import publish
from shared.schema import BenchResult, decode_batch

KEY_TTL_S = 3600  # run keys clean themselves up


class Coordinator:
    """One instance's view of a multi-process run ``run_id`` of ``instances`` processes."""

    def __init__(self, r: redis.Redis, run_id: str, instances: int) -> None:
        self.r = r
        self.run_id = run_id
        self.instances = instances

    def claim_instance(self) -> int:
        """Take this process's instance number, 0-based; fail when all are taken."""
        key = streams.bench_instances_key(self.run_id)
        n = int(self.r.incr(key)) - 1
        self.r.expire(key, KEY_TTL_S)
        if n >= self.instances:
            raise RuntimeError(f"run {self.run_id!r} already has its {self.instances} instances")
        return n

    def claim_comp_ids(self, count: int, first: int) -> int:
        """Claim ``count`` consecutive BENCH numbers for this run; returns the first (1-based)."""
        key = streams.bench_compids_key(self.run_id)
        end = int(self.r.incrby(key, count))
        self.r.expire(key, KEY_TTL_S)
        return first + end - count

    def barrier(self, timeout_s: float) -> None:
        """Arrive, then wait until every instance has arrived (poll: ~1 ms start skew is fine)."""
        key = streams.bench_barrier_key(self.run_id)
        self.r.incr(key)
        self.r.expire(key, KEY_TTL_S)
        deadline = time.monotonic() + timeout_s
        while True:
            arrived = int(self.r.get(key) or 0)
            if arrived >= self.instances:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"barrier: {arrived} of {self.instances} instances arrived "
                                   f"in {timeout_s:.0f}s")
            time.sleep(0.001)

    def publish(self, result: BenchResult) -> None:
        stream = streams.bench_results_stream(self.run_id)
        publish(self.r, stream, [result], maxlen=10_000)
        self.r.expire(stream, KEY_TTL_S)

    def collect(self, timeout_s: float) -> list[BenchResult]:
        """Every instance's result (waits for all of them)."""
        stream = streams.bench_results_stream(self.run_id)
        found: dict[int, BenchResult] = {}
        last_id = "0"
        deadline = time.monotonic() + timeout_s
        while len(found) < self.instances:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"results: {len(found)} of {self.instances} instances reported "
                                   f"in {timeout_s:.0f}s")
            rows: Any = self.r.xread({stream: last_id}, count=100, block=int(min(remaining, 1.0) * 1000))
            for _, entries in rows or []:
                for entry_id, fields in entries:
                    last_id = entry_id
                    for msg in decode_batch(fields[streams.BATCH_FIELD]):
                        if isinstance(msg, BenchResult) and msg.run_id == self.run_id:
                            found[msg.instance] = msg
        return [found[i] for i in sorted(found)]
