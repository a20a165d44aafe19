"""``python -m benchmarks.hops``: where a lone order's round trip goes, hop by hop, beside its floor.

Runs, one after the other on this machine: the engine alone at 1x1 and the lean stack at 1x1 (both
through ``python -m services.bench.suite``, the lean one with ``FIXLAB_HOPTRACE`` set: see
shared/hoptrace.py), and the relay floor (benchmarks.relay). It then pairs each measured order's
marks across the processes (by time: at one order in flight each mark follows the previous one)
and gives the p50 of every hop:

    bench.sent -> gateway.received        client engine, loopback, the gateway's engine and fromApp
    gateway.received -> matcher bus.read  translate, the intake's MULTI/EXEC, Redis, the matcher's wake
    matcher bus.read -> matcher.handled   decode, apply, events encoded (the matcher's own work)
    matcher.handled -> matcher bus.commit the transaction built, the loop
    matcher bus.commit -> gateway bus.read Redis runs it and wakes the gateway's events thread
    gateway bus.read -> gateway.report    decode the events
    gateway.report -> gateway.reported    the ExecutionReport built and handed to QuickFIX
    gateway.reported -> bench.answered    the gateway's engine, loopback, the client's engine

The same hops in the floor: the engine alone's round trip stands for the first and the last three
(a FIX engine in, an ExecutionReport out), the relay's for the two Redis hops. What the lean stack
spends above the floor is split by hop, so a change can be aimed at the hop that costs.
"""

from __future__ import annotations

import argparse
import bisect
import itertools
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from statistics import median
from typing import Any

from benchmarks import output, relay
from shared import hoptrace

# (hop name, process of the start mark, start mark, process of the end mark, end mark)
HOPS: tuple[tuple[str, str, str, str, str], ...] = (
    ("client -> gateway fromApp", "bench", "bench.sent", "gateway", "gateway.received"),
    ("gateway -> Redis -> matcher", "gateway", "gateway.received", "matcher", "bus.read"),
    ("matcher: decode, apply, encode", "matcher", "bus.read", "matcher", "matcher.handled"),
    ("matcher: transaction built", "matcher", "matcher.handled", "matcher", "bus.commit"),
    ("matcher -> Redis -> events thread", "matcher", "bus.commit", "gateway", "bus.read"),
    ("events thread: decode", "gateway", "bus.read", "gateway", "gateway.report"),
    ("events thread: report built, sent", "gateway", "gateway.report", "gateway", "gateway.reported"),
    ("gateway -> client fromApp", "gateway", "gateway.reported", "bench", "bench.answered"),
)
# Which floor each hop belongs to: the engine alone's round trip, or the relay's two Redis hops.
FLOOR_OF = {0: "engine", 1: "relay", 2: "exchange", 3: "exchange", 4: "relay", 5: "exchange",
            6: "engine", 7: "engine"}
IDENTIFYING = {"bench": "bench.sent", "gateway": "gateway.received", "matcher": "matcher.handled"}


def read_marks(files: Iterable[Path]) -> dict[str, dict[str, list[int]]]:
    """Each process kind's marks, by label, in time order (a file's kind: the label only it writes)."""
    out: dict[str, dict[str, list[int]]] = {}
    for path in files:
        marks: dict[str, list[int]] = {}
        for line in path.read_text(encoding="ascii").splitlines():
            label, _, ns = line.partition(" ")
            if ns.isdigit():
                marks.setdefault(label, []).append(int(ns))
        kind = next((k for k, label in IDENTIFYING.items() if label in marks), None)
        if kind is None:
            continue
        merged = out.setdefault(kind, {})
        for label, values in marks.items():
            merged.setdefault(label, []).extend(values)
    for marks in out.values():
        for values in marks.values():
            values.sort()
    return out


def _next(values: Sequence[int], after: int) -> int | None:
    i = bisect.bisect_left(values, after)
    return values[i] if i < len(values) else None


def pair_orders(marks: Mapping[str, Mapping[str, Sequence[int]]], *, skip: float = 0.2,
                limit_ns: int = 50_000_000) -> list[list[int]]:
    """Each lone order's hop durations (ns, in HOPS's order), its marks followed in time.

    From each ``bench.sent`` every next mark is the first of its label after the previous one. An
    order is kept when its chain is complete and ends at the first ``bench.answered`` after it,
    within ``limit_ns``; the first ``skip`` of the orders (the warm-up) are left out.
    """
    sent = list(marks.get("bench", {}).get("bench.sent", ()))
    answered = marks.get("bench", {}).get("bench.answered", ())
    rows = []
    for t0 in sent[int(len(sent) * skip):]:
        times = [t0]
        for _name, _pa, _la, proc, label in HOPS:
            t = _next(marks.get(proc, {}).get(label, ()), times[-1])
            if t is None:
                break
            times.append(t)
        else:
            if times[-1] == _next(answered, t0) and times[-1] - t0 <= limit_ns:
                rows.append([b - a for a, b in itertools.pairwise(times)])
    return rows


def hop_table(rows: Sequence[Sequence[int]]) -> list[dict[str, Any]]:
    """p50 and mean of every hop, in microseconds."""
    table = []
    for i, (name, *_rest) in enumerate(HOPS):
        values = [row[i] for row in rows]
        table.append({"hop": name, "floor": FLOOR_OF[i], "p50_us": round(median(values) / 1000, 1),
                      "mean_us": round(sum(values) / len(values) / 1000, 1)})
    return table


def _suite(stack: str, orders_scale: float, out: Path, trace: str | None) -> dict[str, Any]:
    env = dict(os.environ)
    env.pop(hoptrace.ENV, None)
    if trace:
        env[hoptrace.ENV] = trace
    cmd = [sys.executable, "-m", "services.bench.suite", "--runs", "latency", "--stacks", stack,
           "--no-components", "--scale", str(orders_scale), "--results-dir", str(out)]
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
    doc = json.loads((out / "results.json").read_text())
    run = doc["runs"][0]
    key = "baseline" if stack == "engine" else "exchange"
    return {k: run[key][k] for k in ("orders", "acknowledged", "lost", "ack_p50_us", "ack_p99_us")}


def render(result: Mapping[str, Any]) -> str:
    """The table as Markdown."""
    engine, lean = result["engine"]["ack_p50_us"], result["lean"]
    relay_p50 = result["relay"]["floor"]["p50_us"]
    lines = [
        "# Where a lone order's round trip goes (1x1, lean stack)", "",
        f"Machine: {result['machine']['cpu_model']}, {result['machine']['logical_cpus']} logical CPUs,"
        f" load at start {result['machine']['load_average_at_start'][0]}. Date: {result['date']}.", "",
        f"Command: `{result['command']}`", "",
        f"Engine alone p50 {engine} µs; relay floor p50 {relay_p50} µs"
        f" ({result['relay']['floor']['client']});"
        f" their sum {round(engine + relay_p50, 1)} µs. Lean stack p50 {lean['ack_p50_us']} µs"
        f" (x{lean['ack_p50_us'] / (engine + relay_p50):.2f} of the sum; {result['orders_paired']:,} orders"
        " paired across the processes' marks).", "",
        "| hop | counts against | p50 µs | mean µs |", "| --- | --- | ---: | ---: |",
    ]
    for row in result["hops"]:
        lines.append(f"| {row['hop']} | {row['floor']} | {row['p50_us']} | {row['mean_us']} |")
    by_floor = result["by_floor"]
    lines += ["", "| part | lean stack, sum of hop p50s µs | its floor µs |", "| --- | ---: | ---: |",
              f"| FIX engines, both ways | {by_floor['engine']} | {engine} (engine alone) |",
              f"| two Redis hops | {by_floor['relay']} | {relay_p50} (relay) |",
              f"| the exchange's own steps | {by_floor['exchange']} | 0 |", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.hops", description=__doc__.split("\n\n")[0])
    p.add_argument("--scale", type=float, default=0.5, help="the suite's --scale (1: 20,000 orders)")
    p.add_argument("--relay-rounds", type=int, default=10_000)
    p.add_argument("--out", type=Path, help="write results here (JSON; the Markdown beside it)")
    args = p.parse_args(argv)
    if args.scale <= 0 or args.relay_rounds < 100:
        print("hops: --scale must be positive and --relay-rounds at least 100", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="fixlab-hops-") as tmp:
        root = Path(tmp)
        engine = _suite("engine", args.scale, root / "engine", None)
        lean = _suite("lean", args.scale, root / "lean", str(root / "trace"))
        rows = pair_orders(read_marks(root.glob("trace.*")))
        floor = relay.measure(args.relay_rounds, 1_000)
    if not rows:
        print("hops: no order could be followed through every process's marks", file=sys.stderr)
        return 1
    hops = hop_table(rows)
    by_floor = {k: round(sum(h["p50_us"] for h in hops if h["floor"] == k), 1)
                for k in ("engine", "relay", "exchange")}
    result = {**output.head("hops: a lone order's round trip by hop (lean stack, 1x1)", "benchmarks.hops",
                            argv),
              "engine": engine, "lean": lean, "relay": floor, "orders_paired": len(rows),
              "hops": hops, "by_floor": by_floor}
    output.write(args.out, result, render(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
