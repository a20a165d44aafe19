"""``python -m benchmarks.cold``: the exchange's own steps for one order, warm and cold.

At one order in flight each process of the exchange wakes for one order, then sleeps while the
others run on the same two cores: its code and data have left the CPU caches by the next order.
This times the Python steps a lone order meets, one order per call as the 1x1 run makes them, in
three conditions, in turns (order by order, so the machine's drift hits all three alike):

- warm: calls back to back;
- asleep: 0.5 ms asleep before each call (the core may run something else or idle);
- flushed: 16 MiB written before each call (what the other processes do to the caches).

The steps: the matcher's (the command batch decoded, applied to the book with its market data,
the events encoded, as services.matcher.service does per batch) and the gateway events thread's
(the events decoded, the Accepted's ExecutionReport built and parsed into a QuickFIX message, as
services.gateway.reports does before sendToTarget). p50 in microseconds over every call.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from statistics import median
from typing import Any

import quickfix as fix

from benchmarks import output
from benchmarks.matcher import ACORN, reference_commands
from services.gateway.acceptor import to_message
from services.gateway.outbound import Outbound
from services.matcher.engine import Engine, Limits
from shared.schema import Accepted, as_wire, decode_batch, decode_wire_batch, encode_wire_batch

CONDITIONS = ("warm", "asleep", "flushed")
FLUSH_BYTES = 16 << 20


class _Steps:
    """One order's steps, fed the reference workload (buy, sell, one unit, one price) in turn."""

    def __init__(self, orders: int) -> None:
        self.payloads = [encode_wire_batch([as_wire(c)]) for c in reference_commands(orders, sessions=1)]
        self.engine = Engine([ACORN], limits=Limits(), book_updates=True)  # as the service runs it
        self.outbound = Outbound([ACORN])
        self.i = 0
        self.events: list[bytes] = []

    def matcher(self) -> None:
        cmds = decode_wire_batch(self.payloads[self.i])
        self.i += 1
        result = self.engine.apply_batch(cmds)
        grouped: dict[str | None, list[Any]] = {}
        for dest, wire in result.events:
            grouped.setdefault(dest, []).append(wire)
        payloads = {dest: encode_wire_batch(wires) for dest, wires in grouped.items()}
        self.events.append(payloads["bench"])

    def gateway(self) -> None:
        for ev in decode_batch(self.events.pop(0)):
            if type(ev) is Accepted:
                msg = to_message(self.outbound.report(ev))
                assert isinstance(msg, fix.Message)


def measure(orders: int, warmup: int, block: int = 50) -> dict[str, Any]:
    """p50 per step and condition (µs), each condition on its own copy of the workload, the
    conditions in turns of ``block`` orders (the first tenth of each turn untimed: a warm turn
    starts cold)."""
    steps = {c: _Steps(orders + warmup + block) for c in CONDITIONS}
    junk = bytearray(FLUSH_BYTES)
    ones = b"\x01" * (FLUSH_BYTES // 64)
    times: dict[str, dict[str, list[int]]] = {s: {c: [] for c in CONDITIONS} for s in ("matcher", "gateway")}
    clock = time.perf_counter_ns
    skip = max(1, block // 10)
    done = 0
    while done < orders + warmup:
        for cond in CONDITIONS:
            st = steps[cond]
            calls: tuple[tuple[str, Callable[[], None]], ...] = (("matcher", st.matcher),
                                                                 ("gateway", st.gateway))
            for k in range(block):
                for step, call in calls:
                    if cond == "asleep":
                        time.sleep(0.0005)
                    elif cond == "flushed":
                        junk[::64] = ones  # one byte in every cache line
                    t0 = clock()
                    call()
                    if done >= warmup and k >= skip:
                        times[step][cond].append(clock() - t0)
        done += block
    out: dict[str, Any] = {}
    for step, by in times.items():
        p50 = {c: round(median(v) / 1000, 1) for c, v in by.items()}
        out[step] = {"p50_us": p50, "flushed_over_warm": round(p50["flushed"] / p50["warm"], 2)}
    return out


def render(result: dict[str, Any]) -> str:
    m = result["machine"]
    lines = ["# The exchange's own steps for one order, warm and cold", "",
             f"Machine: {m['cpu_model']}, {m['logical_cpus']} logical CPUs. Date: {result['date']}.", "",
             f"Command: `{result['command']}`", "",
             "| step | warm p50 µs | after 0.5 ms asleep | after 16 MiB written | flushed over warm |",
             "| --- | ---: | ---: | ---: | ---: |"]
    names = {"matcher": "matcher: decode, apply, encode", "gateway": "events thread: decode, report, parse"}
    for step, row in result["steps"].items():
        p = row["p50_us"]
        lines.append(f"| {names[step]} | {p['warm']} | {p['asleep']} | {p['flushed']} | "
                     f"x{row['flushed_over_warm']} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.cold", description=__doc__.split("\n\n")[0])
    p.add_argument("--orders", type=int, default=5000)
    p.add_argument("--warmup", type=int, default=500)
    p.add_argument("--out", type=Path, help="write results here (JSON; the Markdown beside it)")
    args = p.parse_args(argv)
    if args.orders < 10 or args.warmup < 0:
        print("cold: --orders must be at least 10 and --warmup not negative", file=sys.stderr)
        return 2
    result = {**output.head("cold: the exchange's own steps for one order, warm and with the caches flushed",
                            "benchmarks.cold", argv),
              "steps": measure(args.orders, args.warmup)}
    output.write(args.out, result, render(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
